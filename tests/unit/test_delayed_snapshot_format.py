"""Bucket snapshot encoding, segment cutting, bucket keys and merge choice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap

from magnetar.core.delayed.bucket import (
    DELAYED_BUCKET_KEY_PREFIX,
    bucket_key,
    build_snapshot,
    parse_bucket_key,
    select_merged_buckets,
)
from magnetar.core.delayed.bucket_snapshot_storage import (
    BucketNotExistError,
    BucketSnapshotPersistenceError,
    MemoryBucketSnapshotStorage,
)
from magnetar.core.delayed.snapshot_format import (
    DelayedIndex,
    SnapshotFormatError,
    SnapshotMetadata,
    SnapshotSegment,
    SnapshotSegmentMetadata,
    decode_metadata,
    decode_segment,
    encode_metadata,
    encode_segment,
)
from magnetar.core.delayed.triple_long_priority_queue import TripleLongPriorityQueue, pack, unpack

indexes = st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)), max_size=50)


@given(indexes)
def test_pack_orders_like_tuples(triples: list[tuple[int, int, int]]) -> None:
    keys = [pack(*t) for t in triples]
    assert [unpack(k) for k in keys] == triples
    assert sorted(keys) == [pack(*t) for t in sorted(triples)]
    queue = TripleLongPriorityQueue(keys)
    assert [unpack(queue.pop_key()) for _ in range(len(queue))] == sorted(triples)


@given(indexes)
def test_segment_round_trip(triples: list[tuple[int, int, int]]) -> None:
    segment = SnapshotSegment.from_indexes(sorted(triples))
    decoded = decode_segment(encode_segment(segment))
    assert list(decoded.indexes()) == [DelayedIndex(*t) for t in sorted(triples)]
    assert len(encode_segment(segment)) == 9 + 20 * len(triples)


def test_metadata_round_trip() -> None:
    metadata = SnapshotMetadata(
        (
            SnapshotSegmentMetadata({7: BitMap([1, 2, 3]), 9: BitMap([0])}, 200, 100),
            SnapshotSegmentMetadata({2**63: BitMap([2**32 - 1])}, 400, 300),
        )
    )
    decoded = decode_metadata(encode_metadata(metadata))
    assert decoded == metadata
    assert decoded.metadata_list[0].number_of_indexes() == 4


@pytest.mark.parametrize(
    "data",
    [b"", b"XXXX\x01\x00\x00\x00\x00", b"MDSM\x02\x00\x00\x00\x00", b"MDSM\x01\x01\x00\x00\x00"],
)
def test_malformed_metadata_is_rejected(data: bytes) -> None:
    with pytest.raises(SnapshotFormatError):
        decode_metadata(data)


def test_malformed_segment_is_rejected() -> None:
    good = encode_segment(SnapshotSegment.from_indexes([(1, 2, 3)]))
    with pytest.raises(SnapshotFormatError):
        decode_segment(good[:-1])
    with pytest.raises(SnapshotFormatError):
        decode_metadata(good)


def test_bucket_key_is_pulsars() -> None:
    assert DELAYED_BUCKET_KEY_PREFIX == "#pulsar.internal.delayed.bucket"
    assert bucket_key(3, 17) == "#pulsar.internal.delayed.bucket_3_17"
    assert parse_bucket_key("#pulsar.internal.delayed.bucket_3_17") == (3, 17)
    for bad in ("#pulsar.internal.delayed.bucket_3", "#pulsar.internal.delayed.bucket_9_3", "other_1_2"):
        with pytest.raises(ValueError):
            parse_bucket_key(bad)


def _segments(keys: list[int], step_ms: int, max_indexes: int) -> list[list[tuple[int, int, int]]]:
    _, segments = build_snapshot(sorted(keys), step_ms, max_indexes)
    return [[(i.timestamp, i.ledger_id, i.entry_id) for i in segment.indexes()] for segment in segments]


def test_segments_cut_by_time_step() -> None:
    keys = [pack(t, 1, e) for e, t in enumerate([1000, 1050, 1099, 1100, 1250, 1251])]
    assert _segments(keys, 100, -1) == [
        [(1000, 1, 0), (1050, 1, 1), (1099, 1, 2)],
        [(1100, 1, 3)],
        [(1250, 1, 4), (1251, 1, 5)],
    ]


def test_segments_cut_by_count() -> None:
    keys = [pack(1000 + e, 1, e) for e in range(5)]
    assert [len(s) for s in _segments(keys, 10_000, 2)] == [2, 2, 1]
    assert [len(s) for s in _segments(keys, 10_000, -1)] == [5]


def test_segment_metadata_has_bitmaps_and_bounds() -> None:
    keys = sorted([pack(100, 2, 5), pack(150, 1, 9), pack(199, 2, 6), pack(300, 3, 1)])
    metadata, segments = build_snapshot(keys, 100, -1)
    first, second = metadata.metadata_list
    assert (first.min_schedule_timestamp, first.max_schedule_timestamp) == (100, 199)
    assert first.delayed_index_bit_map == {2: BitMap([5, 6]), 1: BitMap([9])}
    assert (second.min_schedule_timestamp, second.max_schedule_timestamp) == (300, 300)
    assert [len(s) for s in segments] == [3, 1]


@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5), st.integers(0, 100)), min_size=1, unique=True),
    st.integers(1, 1000),
    st.sampled_from([-1, 1, 2, 7]),
)
def test_segments_partition_the_sorted_stream(
    triples: list[tuple[int, int, int]], step_ms: int, max_indexes: int
) -> None:
    segments = _segments([pack(*t) for t in triples], step_ms, max_indexes)
    assert [i for segment in segments for i in segment] == sorted(triples)
    for segment in segments:
        assert segment
        assert segment[-1][0] - segment[0][0] < step_ms
        assert max_indexes == -1 or len(segment) <= max_indexes


def test_merge_choice_follows_pip_195_example() -> None:
    assert select_merged_buckets([5, 3, 2, 4, 3], [True] * 5) == 1
    assert select_merged_buckets([5, 3, 2, 4, 3], [True, True, False, True, True]) == 3
    assert select_merged_buckets([1, 1, 1], [True] * 3) == 0
    assert select_merged_buckets([4], [True]) is None
    assert select_merged_buckets([4, 4], [True, False]) is None


def test_memory_storage_round_trip_and_failures() -> None:
    storage = MemoryBucketSnapshotStorage()
    metadata, segments = build_snapshot([pack(10, 1, 1), pack(20, 1, 2)], 5, -1)
    bucket_id = storage.create_bucket_snapshot(metadata, segments, bucket_key(1, 1), "t", "c")
    assert storage.bucket_ids() == [bucket_id]
    assert storage.get_bucket_snapshot_metadata(bucket_id) == metadata
    got = storage.get_bucket_snapshot_segment(bucket_id, 2, 2)
    assert [list(s.indexes()) for s in got] == [[DelayedIndex(20, 1, 2)]]
    assert storage.get_bucket_snapshot_length(bucket_id) == storage.total_bytes() > 0
    storage.inject_failure("get_metadata")
    with pytest.raises(BucketSnapshotPersistenceError):
        storage.get_bucket_snapshot_metadata(bucket_id)
    storage.delete_bucket_snapshot(bucket_id)
    assert storage.bucket_ids() == []
    with pytest.raises(BucketNotExistError):
        storage.get_bucket_snapshot_metadata(bucket_id)
