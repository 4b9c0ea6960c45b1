"""BucketDelayedDeliveryTracker (PIP-195) with the memory snapshot storage and an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.core.delayed.bucket import bucket_key
from magnetar.core.delayed.bucket_delayed_delivery_tracker import (
    BucketDelayedDeliveryTracker,
    RecoverDelayedDeliveryTrackerError,
    clean_residual_snapshots,
)
from magnetar.core.delayed.bucket_delayed_message_index_stats import (
    BUCKET_TOTAL_NAME,
    INDEX_LOADED_NAME,
    OP_COUNT_NAME,
    OP_LATENCY_NAME,
    SNAPSHOT_SIZE_BYTES_NAME,
    OpState,
    OpType,
)
from magnetar.core.delayed.bucket_snapshot_storage import BucketNotExistError, MemoryBucketSnapshotStorage
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.positions import Position


class Cursor:
    """The cursor side: applies the property changes the tracker asks for."""

    def __init__(self) -> None:
        self.properties: dict[str, int | str] = {"unrelated": "kept"}

    def apply(self, tracker: BucketDelayedDeliveryTracker) -> None:
        for key, value in tracker.take_property_changes():
            if value is None:
                del self.properties[key]
            else:
                self.properties[key] = value

    def bucket_properties(self) -> dict[str, int | str]:
        return {k: v for k, v in self.properties.items() if k != "unrelated"}


def make(storage: MemoryBucketSnapshotStorage, **overrides: Any) -> BucketDelayedDeliveryTracker:
    settings: dict[str, Any] = {
        "tick_time_ms": 1,
        "is_delayed_delivery_deliver_at_time_strict": True,
        "min_index_count_per_bucket": 5,
        "max_time_step_per_bucket_snapshot_segment_ms": 10,
        "max_indexes_per_bucket_snapshot_segment": -1,
        "max_num_buckets": 50,
        "topic_name": "persistent://public/default/t",
        "cursor_name": "sub",
    }
    settings.update(overrides)
    return BucketDelayedDeliveryTracker(storage, **settings)


def drain(tracker: BucketDelayedDeliveryTracker, now_ms: int, batch: int = 1000) -> list[Position]:
    out: list[Position] = []
    while True:
        got = tracker.get_scheduled_messages(batch, now_ms)
        if not got:
            return out
        out.extend(got)


@pytest.fixture
def storage() -> MemoryBucketSnapshotStorage:
    return MemoryBucketSnapshotStorage()


def test_satisfies_the_tracker_interface(storage: MemoryBucketSnapshotStorage) -> None:
    tracker: DelayedDeliveryTracker = make(storage)
    assert isinstance(tracker, DelayedDeliveryTracker)


def test_basic_flow(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, is_delayed_delivery_deliver_at_time_strict=False)
    for ledger, entry, at in [(1, 2, 20), (2, 1, 10), (3, 3, 30), (4, 5, 50), (5, 4, 40)]:
        assert tracker.add_message(ledger, entry, at, now_ms=0)
    assert not tracker.has_message_available(0)
    assert tracker.number_of_delayed_messages == 5
    assert not tracker.add_message(6, 6, 10, now_ms=15)
    assert tracker.get_scheduled_messages(10, 15) == [Position(2, 1)]
    assert tracker.get_scheduled_messages(1, 60) == [Position(1, 2)]
    assert tracker.get_scheduled_messages(3, 60) == [Position(3, 3), Position(4, 5), Position(5, 4)]
    assert tracker.number_of_delayed_messages == 0
    assert not tracker.has_message_available(60)


def test_tick_rules(storage: MemoryBucketSnapshotStorage) -> None:
    loose = make(storage, tick_time_ms=100, is_delayed_delivery_deliver_at_time_strict=False)
    assert [loose.add_message(i, i, at, 0) for i, at in enumerate([10, 99, 100, 101, 200])] == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert loose.number_of_delayed_messages == 2
    assert loose.next_delivery_time_ms() == 101
    assert loose.has_message_available(1)  # one tick early at most
    assert not loose.has_message_available(0)
    strict = make(storage, tick_time_ms=100)
    assert [strict.add_message(i, i, at, 10) for i, at in enumerate([9, 10, 11])] == [False, False, True]
    assert not strict.has_message_available(10)
    assert strict.has_message_available(11)


def test_contains_message(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage)
    tracker.add_message(1, 1, 10, 0)
    tracker.add_message(2, 2, 20, 0)
    assert tracker.contains_message(1, 1)
    assert tracker.get_scheduled_messages(1, 20) == [Position(1, 1)]
    assert not tracker.contains_message(1, 1)
    for ledger in range(3, 7):
        tracker.add_message(ledger, ledger, 30, 20)
    assert tracker.contains_message(3, 3)
    assert not tracker.contains_message(3, 4)


def test_seals_only_after_min_count_and_a_later_ledger(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=5)
    cursor = Cursor()
    for entry in range(8):  # ledger 1 is still being written: no seal however many
        tracker.add_message(1, entry, 1000 + entry, 0)
    assert list(tracker.immutable_buckets) == []
    tracker.add_message(2, 0, 2000, 0)
    cursor.apply(tracker)
    (bucket,) = tracker.immutable_buckets
    assert (bucket.start_ledger_id, bucket.end_ledger_id) == (1, 1)
    assert bucket.number_bucket_delayed_messages == 8
    assert storage.bucket_ids() == [bucket.bucket_id]
    assert cursor.bucket_properties() == {bucket_key(1, 1): bucket.bucket_id}
    assert tracker.last_mutable_bucket.start_ledger_id == 2
    assert tracker.number_of_delayed_messages == 9
    # Fewer than the minimum: the mutable range grows instead.
    for ledger in (3, 4):
        tracker.add_message(ledger, 0, 3000, 0)
    assert len(tracker.immutable_buckets) == 1
    assert (tracker.last_mutable_bucket.start_ledger_id, tracker.last_mutable_bucket.end_ledger_id) == (2, 4)


def test_older_ledger_goes_to_memory_not_to_a_snapshot(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1)
    tracker.add_message(5, 0, 100, 0)
    tracker.add_message(6, 0, 100, 0)  # seals [5, 5]
    tracker.add_message(5, 1, 50, 0)  # covered by an immutable bucket
    tracker.add_message(2, 0, 60, 0)  # before the mutable range
    assert len(tracker.immutable_buckets) == 1
    assert tracker.number_of_delayed_messages == 4
    assert drain(tracker, 100) == [Position(2, 0), Position(5, 0), Position(5, 1), Position(6, 0)]


def test_segments_in_storage_follow_time_step_and_count(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(
        storage,
        min_index_count_per_bucket=1,
        max_time_step_per_bucket_snapshot_segment_ms=100,
        max_indexes_per_bucket_snapshot_segment=3,
    )
    times = [1000, 1010, 1020, 1030, 1099, 1200, 1500]
    for entry, at in enumerate(times):
        tracker.add_message(1, entry, at, 0)
    tracker.add_message(2, 0, 5000, 0)
    (bucket,) = tracker.immutable_buckets
    metadata = storage.get_bucket_snapshot_metadata(bucket.bucket_id)
    bounds = [(m.min_schedule_timestamp, m.max_schedule_timestamp) for m in metadata.metadata_list]
    # Count cuts after 3; time cuts when an index is more than 100 ms after its segment's first.
    assert bounds == [(1000, 1020), (1030, 1099), (1200, 1200), (1500, 1500)]
    assert bucket.last_segment_entry_id == 4
    assert bucket.first_schedule_timestamps == [1000, 1030, 1200, 1500]


def test_loads_next_segment_only_when_the_last_index_pops(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1, max_indexes_per_bucket_snapshot_segment=2)
    for entry in range(6):
        tracker.add_message(1, entry, 100 + entry, 0)
    tracker.add_message(2, 0, 10_000, 0)
    (bucket,) = tracker.immutable_buckets
    assert bucket.last_segment_entry_id == 3
    # Only the first segment (2 indexes) and the mutable bucket's one are in memory.
    assert tracker.loaded_index_count == 3
    assert tracker.number_of_delayed_messages == 7
    reads = storage.calls["get_segment"]
    assert tracker.get_scheduled_messages(1, 101) == [Position(1, 0)]
    assert storage.calls["get_segment"] == reads
    assert tracker.get_scheduled_messages(1, 101) == [Position(1, 1)]
    assert storage.calls["get_segment"] == reads + 1
    assert bucket.current_segment_entry_id == 2
    assert tracker.contains_message(1, 5)
    assert tracker.get_scheduled_messages(10, 105) == [Position(1, e) for e in range(2, 6)]
    # Every segment handed out: the snapshot and its property are deleted.
    assert list(tracker.immutable_buckets) == []
    assert storage.bucket_ids() == []
    assert tracker.bucket_properties() == {}


def test_merges_the_two_adjacent_buckets_with_fewest_indexes(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(
        storage,
        min_index_count_per_bucket=1,
        max_indexes_per_bucket_snapshot_segment=1,
        max_num_buckets=4,
    )
    cursor = Cursor()
    counts = [5, 3, 2, 4, 3]
    expected = []
    for ledger, count in enumerate(counts, start=1):
        for entry in range(count):
            tracker.add_message(ledger, entry, 1000 + 10 * ledger + entry, 0)
            expected.append(Position(ledger, entry))
    ids_before = {b.start_ledger_id: b.bucket_id for b in tracker.immutable_buckets}
    tracker.add_message(6, 0, 5000, 0)  # seals ledger 5: five buckets, one too many
    cursor.apply(tracker)
    ranges = [(b.start_ledger_id, b.end_ledger_id) for b in tracker.immutable_buckets]
    assert ranges == [(1, 1), (2, 3), (4, 4), (5, 5)]
    merged = tracker.immutable_buckets[1]
    assert merged.number_bucket_delayed_messages == 5
    assert ids_before[2] not in storage.bucket_ids() and ids_before[3] not in storage.bucket_ids()
    assert sorted(storage.bucket_ids()) == sorted(b.bucket_id for b in tracker.immutable_buckets)
    assert cursor.bucket_properties() == {b.bucket_key: b.bucket_id for b in tracker.immutable_buckets}
    assert tracker.stats.count(OpState.SUCCEED, OpType.MERGE) == 1
    assert drain(tracker, 10_000) == expected + [Position(6, 0)]
    assert storage.bucket_ids() == []


def test_merge_keeps_undelivered_indexes_of_the_loaded_segment(storage: MemoryBucketSnapshotStorage) -> None:
    """Pulsar #26251: a merge must not lose the segment already in memory."""
    tracker = make(storage, min_index_count_per_bucket=1, max_indexes_per_bucket_snapshot_segment=2, max_num_buckets=1)
    cursor = Cursor()
    for entry in range(4):
        tracker.add_message(1, entry, 100 + entry, 0)
    tracker.add_message(2, 0, 200, 0)  # seals ledger 1: segments [0,1] [2,3]
    assert tracker.get_scheduled_messages(1, 100) == [Position(1, 0)]
    for entry in range(1, 4):
        tracker.add_message(2, entry, 200 + entry, 0)
    tracker.add_message(3, 0, 300, 0)  # seals ledger 2 and merges with ledger 1
    cursor.apply(tracker)
    (bucket,) = tracker.immutable_buckets
    assert (bucket.start_ledger_id, bucket.end_ledger_id) == (1, 2)
    assert bucket.number_bucket_delayed_messages == 7
    # A restart right now recovers all seven from the merged snapshot, and 1:0 is not among them.
    tracker.close()
    restarted = make(storage, min_index_count_per_bucket=1, max_indexes_per_bucket_snapshot_segment=2)
    assert restarted.recover(cursor.properties, now_ms=0) == 7
    assert not restarted.contains_message(1, 0)
    assert drain(restarted, 1000) == [Position(1, e) for e in (1, 2, 3)] + [Position(2, e) for e in range(4)]


def test_deletes_snapshots_on_clear(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=2)
    cursor = Cursor()
    for ledger in range(1, 10):
        tracker.add_message(ledger, 0, 1000, 0)
        tracker.add_message(ledger, 1, 1000, 0)
    cursor.apply(tracker)
    assert len(storage.bucket_ids()) == 8
    assert len(cursor.bucket_properties()) == 8
    tracker.clear()
    cursor.apply(tracker)
    assert storage.bucket_ids() == []
    assert cursor.properties == {"unrelated": "kept"}
    assert tracker.number_of_delayed_messages == 0
    assert drain(tracker, 2000) == []


def test_close_keeps_snapshots(storage: MemoryBucketSnapshotStorage) -> None:
    """Pulsar #19801: consumers leaving must not lose the snapshots."""
    tracker = make(storage, min_index_count_per_bucket=2)
    for ledger in range(1, 5):
        tracker.add_message(ledger, 0, 1000, 0)
        tracker.add_message(ledger, 1, 1000, 0)
    held = storage.bucket_ids()
    tracker.close()
    assert storage.bucket_ids() == held != []


def test_recover_snapshot(storage: MemoryBucketSnapshotStorage) -> None:
    """Pulsar's testRecoverSnapshot: 100 messages, one delivered, one left in the mutable bucket."""
    tracker = make(storage, tick_time_ms=100_000)
    cursor = Cursor()
    for i in range(1, 101):
        tracker.add_message(i, i, i * 10, 0)
    assert tracker.number_of_delayed_messages == 100
    assert tracker.get_scheduled_messages(100, 10) == [Position(1, 1)]
    tracker.add_message(101, 101, 1010, 10)
    cursor.apply(tracker)
    tracker.close()

    reads = storage.calls["get_segment"]
    restarted = make(storage, tick_time_ms=1000)
    assert restarted.recover(cursor.properties, now_ms=300) == 70
    cursor.apply(restarted)
    assert not restarted.contains_message(101, 101)
    assert not restarted.contains_message(30, 30)
    assert restarted.contains_message(31, 31)
    # Segments whose messages were all due were never read.
    assert storage.calls["get_segment"] - reads == 14
    assert drain(restarted, 1000) == [Position(i, i) for i in range(31, 101)]
    cursor.apply(restarted)
    assert storage.bucket_ids() == []
    assert cursor.bucket_properties() == {}


def test_recovery_hands_all_due_segments_back_to_the_dispatcher(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=3)
    cursor = Cursor()
    log = [(1, e, 100 + 100 * e) for e in range(6)] + [(2, 0, 5000)]
    for ledger, entry, at in log:
        tracker.add_message(ledger, entry, at, 0)
    cursor.apply(tracker)
    tracker.close()

    restarted = make(storage, min_index_count_per_bucket=3)
    assert restarted.recover(cursor.properties, now_ms=350) == 3
    # The cursor re-reads from the mark-delete: due ones go out directly, tracked ones are held.
    direct = [(ledger, entry) for ledger, entry, at in log if not restarted.add_message(ledger, entry, at, 350)]
    assert direct == [(1, 0), (1, 1), (1, 2)]
    assert restarted.number_of_delayed_messages == 4
    assert drain(restarted, 10_000) == [Position(1, 3), Position(1, 4), Position(1, 5), Position(2, 0)]


def test_recovery_drops_acknowledged_positions_of_a_half_used_segment(
    storage: MemoryBucketSnapshotStorage,
) -> None:
    acked: set[tuple[int, int]] = set()
    tracker = make(storage, min_index_count_per_bucket=1, max_time_step_per_bucket_snapshot_segment_ms=1000)
    cursor = Cursor()
    for entry in range(4):
        tracker.add_message(1, entry, 100 * (entry + 1), 0)
    tracker.add_message(2, 0, 5000, 0)
    for position in tracker.get_scheduled_messages(10, 200):
        acked.add(position)
    assert acked == {(1, 0), (1, 1)}
    cursor.apply(tracker)
    tracker.close()

    restarted = make(storage, min_index_count_per_bucket=1, is_acknowledged=lambda lid, eid: (lid, eid) in acked)
    restarted.recover(cursor.properties, now_ms=200)
    assert restarted.number_of_delayed_messages == 2
    assert drain(restarted, 1000) == [Position(1, 2), Position(1, 3)]


def test_recovery_with_mark_delete_trims(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=2)
    cursor = Cursor()
    for ledger in range(1, 6):
        tracker.add_message(ledger, 0, 1000, 0)
        tracker.add_message(ledger, 1, 1000, 0)
    cursor.apply(tracker)
    tracker.close()
    restarted = make(storage, min_index_count_per_bucket=2)
    restarted.recover(cursor.properties, now_ms=0, mark_delete_position=Position(3, 0))
    cursor.apply(restarted)
    assert [(b.start_ledger_id, b.end_ledger_id) for b in restarted.immutable_buckets] == [(3, 3), (4, 4)]
    assert len(storage.bucket_ids()) == 2
    assert drain(restarted, 2000) == [Position(3, 1), Position(4, 0), Position(4, 1)]


def test_recovery_cleans_the_inputs_of_an_interrupted_merge(storage: MemoryBucketSnapshotStorage) -> None:
    settings: dict[str, Any] = {"min_index_count_per_bucket": 1, "max_indexes_per_bucket_snapshot_segment": 1}
    tracker = make(storage, max_num_buckets=2, **settings)
    cursor = Cursor()
    # The merge writes its snapshot and property, then cannot delete its inputs: as if it
    # crashed right there.
    storage.inject_failure("delete", times=2 * 4)
    for ledger in range(1, 5):
        tracker.add_message(ledger, 0, 1000 + ledger, 0)
        tracker.add_message(ledger, 1, 2000 + ledger, 0)
    cursor.apply(tracker)
    assert set(cursor.bucket_properties()) == {
        bucket_key(1, 1),
        bucket_key(2, 2),
        bucket_key(1, 2),
        bucket_key(3, 3),
    }
    assert len(storage.bucket_ids()) == 4
    tracker.close()

    restarted = make(storage, **settings)
    restarted.recover(cursor.properties, now_ms=0)
    cursor.apply(restarted)
    assert [(b.start_ledger_id, b.end_ledger_id) for b in restarted.immutable_buckets] == [(1, 2), (3, 3)]
    assert sorted(storage.bucket_ids()) == sorted(b.bucket_id for b in restarted.immutable_buckets)
    assert set(cursor.bucket_properties()) == {bucket_key(1, 2), bucket_key(3, 3)}
    restarted.add_message(4, 0, 1004, 0)
    restarted.add_message(4, 1, 2004, 0)
    assert sorted(drain(restarted, 10_000)) == [Position(ledger, e) for ledger in range(1, 5) for e in (0, 1)]


def test_recovery_forgets_properties_of_missing_snapshots(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage)
    assert tracker.recover({bucket_key(1, 4): 999, "other": 5}, now_ms=0) == 0
    assert tracker.take_property_changes() == [(bucket_key(1, 4), None)]


def test_recovery_failure_lets_the_factory_fall_back(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1)
    cursor = Cursor()
    tracker.add_message(1, 0, 100, 0)
    tracker.add_message(2, 0, 100, 0)
    cursor.apply(tracker)
    storage.inject_failure("get_metadata", times=4)
    with pytest.raises(RecoverDelayedDeliveryTrackerError):
        make(storage).recover(cursor.properties, now_ms=0)
    with pytest.raises(RecoverDelayedDeliveryTrackerError):
        make(storage).recover({bucket_key(1, 1): "x"}, now_ms=0)
    with pytest.raises(RecoverDelayedDeliveryTrackerError, match="overlaps"):
        make(storage).recover({bucket_key(1, 3): 1, bucket_key(2, 5): 2}, now_ms=0)


def test_transient_failures_are_retried(storage: MemoryBucketSnapshotStorage) -> None:
    """Pulsar's testWithBkException: one failure of each kind costs nothing."""
    tracker = make(storage, min_index_count_per_bucket=5, max_num_buckets=10)
    for op in ("create", "get_metadata", "get_segment", "delete"):
        storage.inject_failure(op)
    cursor = Cursor()
    for i in range(1, 111):
        tracker.add_message(i, i, i * 10, 0)
    cursor.apply(tracker)
    assert len(tracker.immutable_buckets) <= 10
    tracker.close()
    restarted = make(storage, min_index_count_per_bucket=5, max_num_buckets=10)
    recovered = restarted.recover(cursor.properties, now_ms=0)
    assert recovered == 105
    for i in range(1, 111):
        restarted.add_message(i, i, i * 10, 0)
    assert drain(restarted, 2000) == [Position(i, i) for i in range(1, 111)]
    for op in ("create", "get_metadata", "get_segment", "delete"):
        assert storage.pending_failures(op) == 0


def test_create_failure_keeps_indexes_in_memory(storage: MemoryBucketSnapshotStorage) -> None:
    """Pulsar's testWithCreateFailDowngrade."""
    tracker = make(storage)
    storage.inject_failure("create", times=4)
    for i in range(1, 7):
        tracker.add_message(i, i, i * 10, 0)
    assert list(tracker.immutable_buckets) == []
    assert storage.bucket_ids() == []
    assert tracker.number_of_delayed_messages == 6
    assert tracker.get_scheduled_messages(5, 50) == [Position(i, i) for i in range(1, 6)]
    assert tracker.stats.count(OpState.FAILED, OpType.CREATE) == 1


def test_load_failure_is_retried_a_tick_later(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, tick_time_ms=50, min_index_count_per_bucket=1, max_indexes_per_bucket_snapshot_segment=1)
    for entry in range(3):
        tracker.add_message(1, entry, 100 + entry, 0)
    tracker.add_message(2, 0, 10_000, 0)
    storage.inject_failure("get_segment", times=4)
    assert tracker.get_scheduled_messages(10, 200) == []
    assert tracker.stats.count(OpState.FAILED, OpType.LOAD) == 1
    assert not tracker.has_message_available(220)
    assert tracker.next_delivery_time_ms() == 250
    assert tracker.has_message_available(250)
    assert tracker.get_scheduled_messages(10, 250) == [Position(1, 0), Position(1, 1), Position(1, 2)]


def test_delete_failure_is_retried_later(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1)
    cursor = Cursor()
    tracker.add_message(1, 0, 100, 0)
    tracker.add_message(2, 0, 200, 0)
    cursor.apply(tracker)
    storage.inject_failure("delete", times=4)
    assert tracker.get_scheduled_messages(10, 100) == [Position(1, 0)]
    cursor.apply(tracker)
    assert len(storage.bucket_ids()) == 1
    assert bucket_key(1, 1) in cursor.properties  # kept until the snapshot is really gone
    assert tracker.get_scheduled_messages(10, 200) == [Position(2, 0)]
    cursor.apply(tracker)
    assert storage.bucket_ids() == []
    assert cursor.bucket_properties() == {}


def test_readding_an_expired_tracked_message(storage: MemoryBucketSnapshotStorage) -> None:
    """testExpiredTrackedMessageReturnsFalse / ...DecrementsCount."""
    tracker = make(storage)
    assert tracker.add_message(1, 1, 100, 0)
    assert tracker.add_message(1, 2, 100, 0)
    assert tracker.add_message(1, 1, 100, 0)
    assert tracker.number_of_delayed_messages == 2
    assert not tracker.add_message(1, 1, 100, 150)
    assert tracker.number_of_delayed_messages == 1
    assert drain(tracker, 150) == [Position(1, 2)]
    assert tracker.number_of_delayed_messages == 0


def test_trim_removes_buckets_before_the_mark_delete(storage: MemoryBucketSnapshotStorage) -> None:
    """testTrimRemovesOrphanedBuckets / ...DoesNotDeleteBucketOverlappingFirstActiveLedger."""
    tracker = make(storage, min_index_count_per_bucket=2)
    cursor = Cursor()
    for ledger in range(1, 6):
        for entry in range(2):
            tracker.add_message(ledger, entry, 1000, 0)
    cursor.apply(tracker)
    assert len(tracker.immutable_buckets) == 4
    tracker.on_mark_delete(Position(3, 0))
    cursor.apply(tracker)
    assert [(b.start_ledger_id, b.end_ledger_id) for b in tracker.immutable_buckets] == [(3, 3), (4, 4)]
    assert len(storage.bucket_ids()) == 2
    assert set(cursor.bucket_properties()) == {bucket_key(3, 3), bucket_key(4, 4)}
    assert tracker.number_of_delayed_messages == 5
    assert drain(tracker, 1000) == [
        Position(3, 1),
        Position(4, 0),
        Position(4, 1),
        Position(5, 0),
        Position(5, 1),
    ]


def test_everything_acknowledged_frees_everything(storage: MemoryBucketSnapshotStorage) -> None:
    """testGetScheduledMessagesWhenAllOrphaned, and nothing left behind."""
    tracker = make(storage, min_index_count_per_bucket=1, max_indexes_per_bucket_snapshot_segment=1)
    for ledger in range(1, 5):
        tracker.add_message(ledger, 0, 1000 + ledger, 0)
        tracker.add_message(ledger, 1, 2000 + ledger, 0)
    tracker.on_mark_delete(Position(10, 0))
    assert tracker.number_of_delayed_messages == 0
    assert drain(tracker, 5000) == []
    assert storage.bucket_ids() == []
    assert tracker.bucket_properties() == {}
    assert tracker.loaded_index_count == 0


def test_metrics(storage: MemoryBucketSnapshotStorage) -> None:
    clock = iter(range(0, 10_000, 7))
    tracker = make(
        storage,
        min_index_count_per_bucket=1,
        max_indexes_per_bucket_snapshot_segment=1,
        max_num_buckets=2,
        latency_clock_ms=lambda: next(clock),
    )
    for ledger in range(1, 5):
        tracker.add_message(ledger, 0, 1000 + ledger, 0)
        tracker.add_message(ledger, 1, 2000 + ledger, 0)
    samples = {(s.name, s.labels): s.value for s in tracker.metric_samples()}
    assert samples[(BUCKET_TOTAL_NAME, ())] == len(tracker.immutable_buckets) + 1 == 3
    assert samples[(INDEX_LOADED_NAME, ())] == tracker.loaded_index_count
    assert samples[(SNAPSHOT_SIZE_BYTES_NAME, ())] == storage.total_bytes() > 0
    assert samples[(OP_COUNT_NAME, (("state", "succeed"), ("type", "create")))] == 4
    assert samples[(OP_COUNT_NAME, (("state", "all"), ("type", "create")))] == 4
    assert samples[(OP_COUNT_NAME, (("state", "succeed"), ("type", "merge")))] == 1
    assert samples[(OP_COUNT_NAME, (("state", "succeed"), ("type", "delete")))] == 2
    assert samples[(OP_LATENCY_NAME, (("type", "create"), ("quantile", "50")))] == 4
    assert samples[(OP_LATENCY_NAME + "_count", (("type", "create"),))] == 4
    assert samples[(OP_LATENCY_NAME + "_sum", (("type", "create"),))] == 28
    drain(tracker, 5000)
    assert tracker.stats.count(OpState.SUCCEED, OpType.LOAD) > 0
    assert tracker.snapshot_size_bytes == storage.total_bytes() == 0


def test_clean_residual_snapshots(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1)
    cursor = Cursor()
    for ledger in range(1, 4):
        tracker.add_message(ledger, 0, 100, 0)
    cursor.apply(tracker)
    tracker.close()
    removed = clean_residual_snapshots({**cursor.properties, bucket_key(8, 9): 12345}, storage)
    assert sorted(removed) == sorted([*cursor.bucket_properties(), bucket_key(8, 9)])
    assert storage.bucket_ids() == []
    with pytest.raises(BucketNotExistError):
        storage.delete_bucket_snapshot(1)


def test_max_messages_and_sorted_output(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=3, max_indexes_per_bucket_snapshot_segment=2)
    for ledger in range(1, 5):
        for entry in range(3):
            tracker.add_message(ledger, entry, 1000 - 10 * ledger + entry, 0)
    got = tracker.get_scheduled_messages(5, 1000)
    assert got == sorted(got) and len(got) == 5
    rest = drain(tracker, 1000)
    assert sorted(got + rest) == [Position(ledger, e) for ledger in range(1, 5) for e in range(3)]


def test_rejects_bad_settings(storage: MemoryBucketSnapshotStorage) -> None:
    with pytest.raises(ValueError):
        make(storage, max_indexes_per_bucket_snapshot_segment=0)
    with pytest.raises(ValueError):
        make(storage, max_time_step_per_bucket_snapshot_segment_ms=0)
    with pytest.raises(ValueError):
        make(storage, tick_time_ms=-1)


def test_next_delivery_time_covers_mutable_and_shared_queues(storage: MemoryBucketSnapshotStorage) -> None:
    tracker = make(storage, min_index_count_per_bucket=1)
    assert tracker.next_delivery_time_ms() is None
    tracker.add_message(1, 0, 500, 0)
    tracker.add_message(2, 0, 300, 0)  # seals ledger 1: 500 moves to the shared queue
    assert tracker.next_delivery_time_ms() == 300  # the mutable bucket's
    tracker.add_message(1, 1, 200, 0)  # an immutable bucket's range: straight to the shared queue
    assert tracker.next_delivery_time_ms() == 200
    assert not tracker.has_message_available(199)
    assert tracker.get_scheduled_messages(10, 200) == [Position(1, 1)]
    assert tracker.next_delivery_time_ms() == 300
    tracker.reset_tick_time(1000)
    assert tracker.tick_time_ms == 1000


@pytest.mark.parametrize("strict", [True, False])
def test_restart_delivers_nothing_early(storage: MemoryBucketSnapshotStorage, strict: bool) -> None:
    """Pulsar #22716: after a restart, delayed messages were delivered at once."""
    hour_ms, tick_ms = 3_600_000, 1000
    settings: dict[str, Any] = {
        "tick_time_ms": tick_ms,
        "is_delayed_delivery_deliver_at_time_strict": strict,
        "min_index_count_per_bucket": 100,
        "max_indexes_per_bucket_snapshot_segment": 30,
    }
    tracker = make(storage, **settings)
    cursor = Cursor()
    log = [(1 + i // 100, i % 100, hour_ms + i) for i in range(1000)]
    for ledger, entry, at in log:
        assert tracker.add_message(ledger, entry, at, 0)
    cursor.apply(tracker)
    tracker.close()

    restarted = make(storage, **settings)
    restarted.recover(cursor.properties, now_ms=1_000)
    assert not [p for p in log if not restarted.add_message(p[0], p[1], p[2], 1_000)]
    assert restarted.number_of_delayed_messages == 1000
    earliest = hour_ms if strict else hour_ms - tick_ms
    assert drain(restarted, earliest - 1) == []
    delivered = drain(restarted, hour_ms + 1000)
    assert delivered == [Position(ledger, entry) for ledger, entry, _ in log]
