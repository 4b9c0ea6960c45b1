"""A batch whose messages carry ids that are not consecutive, published without
``highest_sequence_id`` (as the official clients send batches), is stored with it set to its
last message's id, so deduplication knows that id from the stored metadata alone; anything
that cannot be read is stored as sent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.dedup.recorded_batch import with_last_sequence_id
from magnetar.core.topics.publish import last_sequence_id
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress, iter_batch, make_batch
from magnetar.wire.frames import crc32c, make_entry, parse_entry

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
MAX_BYTES = 5 * 1024 * 1024


def batch(ids: list[int | None], codec: int = pb.NONE, **fields: object) -> tuple[pb.MessageMetadata, bytes]:
    records = []
    for i, seq in enumerate(ids):
        single = pb.SingleMessageMetadata(payload_size=0)
        if seq is not None:
            single.sequence_id = seq
        records.append((single, f"m{i}".encode()))
    raw = make_batch(records)
    first = next((s for s in ids if s is not None), 0)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=first, publish_time=1, compression=codec,
                                  uncompressed_size=len(raw), num_messages_in_batch=len(ids), **fields)
    return metadata, make_entry(metadata, compress(codec, raw))


def recorded(metadata: pb.MessageMetadata, entry: bytes) -> tuple[pb.MessageMetadata, bytes] | None:
    return with_last_sequence_id(metadata, entry, last_sequence_id(metadata), MAX_BYTES)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_with_ids_that_are_not_consecutive_is_stored_with_its_last_id(codec: int) -> None:
    metadata, entry = batch([10, 20, 35], codec)
    assert last_sequence_id(metadata) == 12  # what the metadata alone says
    found = recorded(metadata, entry)
    assert found is not None
    stored_metadata, stored = found
    assert last_sequence_id(stored_metadata) == 35
    parsed = parse_entry(stored)
    assert parsed.metadata == stored_metadata and parsed.metadata.highest_sequence_id == 35
    assert bytes(parsed.payload) == bytes(parse_entry(entry).payload)
    assert parsed.checksum == crc32c(stored[6:])
    assert [s.sequence_id for s, _ in iter_batch(parsed.metadata, parsed.payload)] == [10, 20, 35]


@pytest.mark.parametrize(("ids", "fields"), [
    ([10, 11, 12], {}),                      # consecutive: the metadata says it already
    ([None, None, None], {}),                # no ids of their own: first + count - 1
    ([10, 20, 35], {"highest_sequence_id": 35}),
    ([10, 20, 35], {"encryption_keys": [pb.EncryptionKeys(key="k", value=b"v")]}),
    ([10, 20, 35], {"uuid": "u", "num_chunks_from_msg": 2, "chunk_id": 1}),
], ids=["consecutive", "no-own-ids", "highest-set", "encrypted", "chunk"])
def test_batches_the_metadata_describes_or_that_cannot_be_read_are_stored_as_sent(
        ids: list[int | None], fields: dict[str, object]) -> None:
    metadata, entry = batch(ids, pb.LZ4, **fields)
    assert recorded(metadata, entry) is None


def test_a_batch_claiming_to_expand_beyond_the_limit_is_not_read() -> None:
    metadata, entry = batch([10, 20, 35], pb.ZSTD)
    assert with_last_sequence_id(metadata, entry, 12, max_bytes=metadata.uncompressed_size - 1) is None


def test_a_single_message_is_stored_as_sent() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=1)
    assert recorded(metadata, make_entry(metadata, b"x")) is None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.integers(-2, 50), st.integers(0, 2**20), st.binary(max_size=120),
       st.integers(0, 2**40))
def test_any_payload_is_read_without_raising(codec: int, count: int, size: int, payload: bytes, first: int) -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=first, publish_time=1, compression=codec,
                                  uncompressed_size=size, num_messages_in_batch=count)
    found = recorded(metadata, make_entry(metadata, payload))
    assert found is None or last_sequence_id(found[0]) > last_sequence_id(metadata)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=8), st.sampled_from(CODECS), st.integers(0, 60))
def test_a_cut_batch_is_stored_as_sent_or_by_its_last_readable_id(ids: list[int], codec: int, cut: int) -> None:
    metadata, entry = batch(sorted(ids), codec)
    found = recorded(metadata, entry[: max(0, len(entry) - cut)] if cut else entry)
    if found is not None:
        assert last_sequence_id(found[0]) == max(ids)
