"""The bucket-based delayed-delivery tracker of PIP-195: Pulsar's ``BucketDelayedDeliveryTracker``.

The index is split by ledger range into buckets. The last, mutable bucket takes the
messages of the ledgers being written; once it holds ``min_index_count_per_bucket``
indexes and a message from a later ledger arrives (its ledgers are complete), it is sealed
into an immutable bucket: written to ``BucketSnapshotStorage`` as a snapshot of segments,
with only its first segment kept, in one shared priority queue. When the last index of a
bucket's loaded segment leaves the queue, the next segment is loaded; when the last
segment is used up, the snapshot is deleted. Beyond ``max_num_buckets`` immutable buckets,
the two adjacent ones with the fewest indexes are merged into one snapshot.

Memory therefore holds: the mutable bucket, one segment per immutable bucket, and one
roaring bitmap per ledger of every tracked position (``DelayedMessageIndex``), which answers
``contains_message`` and decides which queue copy of a position is handed out (exactly the
pop that removes it from the index).

Persistence and recovery: each snapshot's id is a cursor property
``#pulsar.internal.delayed.bucket_<start>_<end>``. The tracker never writes properties
itself; it records the puts and removals it wants (``take_property_changes``) and the shell
applies them to the cursor. A snapshot's property is put only after the snapshot is
stored, and removed only after it is deleted, so a crash can leave a snapshot without a
property (garbage for ``clean_residual_snapshots``) but never a property without its
snapshot's data. ``recover`` rebuilds from the properties: per bucket it reads the
metadata, skips the leading segments whose messages are all due (the dispatcher delivers
those when it re-reads the ledgers, since ``add_message`` then answers False), restores the
bitmaps of the rest and loads the first of them. Messages that were only in memory (the
mutable bucket, or added straight to the shared queue) come back the same way, by
re-reading from the mark-delete position.

Storage calls are synchronous here. Transient failures are retried ``MAX_RETRY_TIMES`` (:mod:`.snapshot_calls`)
times; a snapshot that cannot be created leaves its indexes in memory (Pulsar's
downgrade), a segment that cannot be loaded is retried a tick later, a snapshot that
cannot be deleted is retried on later calls, and a recovery that cannot read its
snapshots raises ``RecoverDelayedDeliveryTrackerError`` so the factory can fall back to the
in-memory tracker (which rebuilds by re-reading).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from itertools import chain

from magnetar.core.delayed.bucket import (
    DEFAULT_MAX_INDEXES_PER_BUCKET_SNAPSHOT_SEGMENT,
    DEFAULT_MAX_NUM_BUCKETS,
    DEFAULT_MAX_TIME_STEP_PER_BUCKET_SNAPSHOT_SEGMENT_SECONDS,
    DEFAULT_MIN_INDEX_COUNT_PER_BUCKET,
    bucket_key,
    build_snapshot,
    is_bucket_key,
    parse_bucket_key,
    select_merged_buckets,
)
from magnetar.core.delayed.bucket_delayed_message_index_stats import (
    BucketDelayedMessageIndexStats,
    MetricSample,
    OpType,
)
from magnetar.core.delayed.bucket_snapshot_storage import (
    BucketNotExistError,
    BucketSnapshotStorage,
)
from magnetar.core.delayed.delayed_message_index import DelayedMessageIndex
from magnetar.core.delayed.immutable_bucket import ImmutableBucket
from magnetar.core.delayed.mutable_bucket import MutableBucket
from magnetar.core.delayed.snapshot_calls import STORAGE_ERRORS, SnapshotCalls
from magnetar.core.delayed.snapshot_format import SnapshotSegment
from magnetar.core.delayed.tracker import DEFAULT_TICK_TIME_MS, IndexedTracker, check_position
from magnetar.core.delayed.triple_long_priority_queue import (
    TripleLongPriorityQueue,
    key_position,
    key_timestamp,
    pack,
)
from magnetar.core.positions import Position

#: A cursor property the tracker wants written (value) or removed (None).
PropertyChange = tuple[str, int | None]


class RecoverDelayedDeliveryTrackerError(Exception):
    """The stored buckets could not be read back; use an in-memory tracker and re-read."""


class BucketDelayedDeliveryTracker(IndexedTracker):
    """Delayed-message index whose bulk lives in stored, segmented bucket snapshots."""

    def __init__(
        self,
        storage: BucketSnapshotStorage,
        *,
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        is_delayed_delivery_deliver_at_time_strict: bool = False,
        min_index_count_per_bucket: int = DEFAULT_MIN_INDEX_COUNT_PER_BUCKET,
        max_time_step_per_bucket_snapshot_segment_ms: int = (
            DEFAULT_MAX_TIME_STEP_PER_BUCKET_SNAPSHOT_SEGMENT_SECONDS * 1000
        ),
        max_indexes_per_bucket_snapshot_segment: int = DEFAULT_MAX_INDEXES_PER_BUCKET_SNAPSHOT_SEGMENT,
        max_num_buckets: int = DEFAULT_MAX_NUM_BUCKETS,
        topic_name: str = "",
        cursor_name: str = "",
        is_acknowledged: Callable[[int, int], bool] | None = None,
        latency_clock_ms: Callable[[], float] | None = None,
    ) -> None:
        """``is_acknowledged(ledger, entry)`` (the cursor's individually-deleted check) drops
        acknowledged positions when segments load, so a restart does not hand out again what
        was delivered and acknowledged from a half-used segment. ``latency_clock_ms`` is only
        read to time snapshot operations for the latency metric."""
        if tick_time_ms < 0:
            raise ValueError(f"delayedDeliveryTickTimeMillis must be >= 0, got {tick_time_ms}")
        if min_index_count_per_bucket < 0:
            raise ValueError(f"delayedDeliveryMinIndexCountPerBucket must be >= 0, got {min_index_count_per_bucket}")
        if max_time_step_per_bucket_snapshot_segment_ms <= 0:
            raise ValueError(
                "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds must be > 0, got "
                f"{max_time_step_per_bucket_snapshot_segment_ms} ms"
            )
        if max_indexes_per_bucket_snapshot_segment != -1 and max_indexes_per_bucket_snapshot_segment <= 0:
            raise ValueError(
                "delayedDeliveryMaxIndexesPerBucketSnapshotSegment must be > 0 or -1 (no limit), got "
                f"{max_indexes_per_bucket_snapshot_segment}"
            )
        self._tick_time_ms = tick_time_ms
        self._strict = is_delayed_delivery_deliver_at_time_strict
        self._min_index_count_per_bucket = min_index_count_per_bucket
        self._max_time_step_ms = max_time_step_per_bucket_snapshot_segment_ms
        self._max_indexes_per_segment = max_indexes_per_bucket_snapshot_segment
        self._max_num_buckets = max_num_buckets
        self._topic_name = topic_name
        self._cursor_name = cursor_name
        self._is_acknowledged = is_acknowledged
        self.stats = BucketDelayedMessageIndexStats()
        self._calls = SnapshotCalls(storage, self.stats, latency_clock_ms)

        self._mutable = MutableBucket()
        self._shared = TripleLongPriorityQueue()
        self._index = DelayedMessageIndex()
        # Immutable buckets sorted by start ledger; ranges never overlap.
        self._buckets: list[ImmutableBucket] = []
        self._bucket_starts: list[int] = []
        self._triggers: dict[int, ImmutableBucket] = {}
        self._properties: dict[str, int] = {}
        self._property_changes: list[PropertyChange] = []
        self._load_retry_at_ms: int | None = None
        self._mark_delete: Position | None = None

    # -- recovery -----------------------------------------------------------------------

    def recover(
        self,
        properties: Mapping[str, int | str],
        now_ms: int,
        mark_delete_position: Position | None = None,
    ) -> int:
        """Rebuild from the cursor properties; returns how many delayed messages came back."""
        if self._buckets or self._shared or len(self._mutable) or len(self._index):
            raise RuntimeError("recover() must be called before the tracker is used")
        found = self._bucket_keys_in(properties)
        accepted, stale = _split_overlaps(found)
        for start, end, bucket_id, key in accepted:
            self._recover_bucket(start, end, bucket_id, key, self._cutoff(now_ms))
        if mark_delete_position is not None:
            self.on_mark_delete(mark_delete_position)
        for bucket in list(self._buckets):
            if not self._load_next_segment(bucket):
                raise RecoverDelayedDeliveryTrackerError(
                    f"cannot load a segment of delayed bucket snapshot {bucket.bucket_id} ({bucket.bucket_key})"
                )
        # A merge interrupted by a crash leaves its inputs behind, enclosed by its output.
        for _, _, bucket_id, key in stale:
            self._calls.delete(bucket_id, key, self._remove_property)
        return len(self._index)

    def _bucket_keys_in(self, properties: Mapping[str, int | str]) -> list[tuple[int, int, int, str]]:
        found = []
        for key, value in properties.items():
            if not is_bucket_key(key):
                continue
            try:
                start, end = parse_bucket_key(key)
                bucket_id = int(value)
            except ValueError as exc:
                raise RecoverDelayedDeliveryTrackerError(f"bad delayed bucket property {key}={value!r}") from exc
            self._properties[key] = bucket_id
            found.append((start, end, bucket_id, key))
        return found

    def _recover_bucket(self, start: int, end: int, bucket_id: int, key: str, cutoff_ms: int) -> None:
        try:
            metadata = self._calls.with_retry(lambda: self._calls.storage.get_bucket_snapshot_metadata(bucket_id))
        except BucketNotExistError:
            self._remove_property(key, bucket_id)
            return
        except STORAGE_ERRORS as exc:
            raise RecoverDelayedDeliveryTrackerError(
                f"cannot read delayed bucket snapshot {bucket_id} ({key}): {exc}"
            ) from exc
        segments = metadata.metadata_list
        first_live = 0
        while first_live < len(segments) and segments[first_live].max_schedule_timestamp <= cutoff_ms:
            first_live += 1
        if first_live == len(segments):
            self._calls.delete(bucket_id, key, self._remove_property)
            return
        count = 0
        for segment in segments[first_live:]:
            for ledger_id, bitmap in segment.delayed_index_bit_map.items():
                self._index.restore(ledger_id, bitmap)
                count += len(bitmap)
        bucket = ImmutableBucket(
            start_ledger_id=start,
            end_ledger_id=end,
            bucket_id=bucket_id,
            last_segment_entry_id=len(segments),
            current_segment_entry_id=first_live,
            number_bucket_delayed_messages=count,
            first_schedule_timestamps=[segment.min_schedule_timestamp for segment in segments],
            snapshot_length_bytes=self._calls.snapshot_length(bucket_id),
        )
        self._insert_bucket(bucket)

    # -- the tracker interface ----------------------------------------------------------

    def add_message(self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int) -> bool:
        check_position(ledger_id, entry_id)
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff(now_ms):
            # Re-read after it came due (a rewind, a restart): the dispatcher delivers it now,
            # and the copy still queued here is dropped when it pops.
            self._index.untrack(ledger_id, entry_id)
            return False
        if self._index.contains(ledger_id, entry_id):
            return True
        bucket = self._find_immutable_bucket(ledger_id)
        mutable = self._mutable
        if (
            bucket is None
            and ledger_id > mutable.end_ledger_id
            and len(mutable) >= self._min_index_count_per_bucket
            and len(mutable) > 0
        ):
            self._seal_mutable_bucket()
        key = pack(deliver_at_ms, ledger_id, entry_id)
        if bucket is None and ledger_id >= mutable.end_ledger_id:
            mutable.add_key(key, ledger_id)
        else:
            # An older ledger than the mutable range, or one an immutable bucket covers: it
            # is only kept in memory, and comes back by re-reading after a restart.
            self._shared.add_key(key)
        self._index.track(ledger_id, entry_id)
        return True

    def has_message_available(self, now_ms: int) -> bool:
        if not len(self._index):
            return False
        next_ms = self._next_queued_time_ms()
        if next_ms is None or next_ms > self._cutoff(now_ms):
            return False
        return self._load_retry_at_ms is None or now_ms >= self._load_retry_at_ms

    def get_scheduled_messages(self, max_messages: int, now_ms: int) -> list[Position]:
        if max_messages <= 0:
            return []
        self._calls.retry_pending_deletes(self._remove_property)
        cutoff = self._cutoff(now_ms)
        self._mutable.move_scheduled_messages_to(self._shared, cutoff)
        positions: list[Position] = []
        shared, index, triggers = self._shared, self._index, self._triggers
        while len(positions) < max_messages and shared:
            key = shared.peek_key()
            if key_timestamp(key) > cutoff:
                break
            bucket = triggers.get(key)
            if bucket is not None and not self._advance_bucket(bucket, key, now_ms):
                break
            shared.pop_key()
            ledger_id, entry_id = key_position(key)
            if index.untrack(ledger_id, entry_id):
                positions.append(Position(ledger_id, entry_id))
        self._drop_buckets_if_index_empty()
        positions.sort()
        return positions

    def next_delivery_time_ms(self) -> int | None:
        if not len(self._index):
            return None
        next_ms = self._next_queued_time_ms()
        if next_ms is not None and self._load_retry_at_ms is not None:
            next_ms = max(next_ms, self._load_retry_at_ms)
        return next_ms

    def _next_queued_time_ms(self) -> int | None:
        mutable_ms = self._mutable.next_delivery_time_ms()
        shared_ms = self._shared.peek_timestamp() if self._shared else None
        if mutable_ms is None or shared_ms is None:
            return shared_ms if mutable_ms is None else mutable_ms
        return min(mutable_ms, shared_ms)

    @property
    def buffer_memory_bytes(self) -> int:
        return self._mutable.bytes_capacity() + self._shared.bytes_capacity() + self._index.memory_bytes()

    def should_pause_all_deliveries(self, now_ms: int) -> bool:
        return False

    def on_mark_delete(self, position: Position) -> None:
        """Forget acknowledged positions; delete buckets wholly before the mark-delete ledger."""
        if self._mark_delete is not None and position <= self._mark_delete:
            return
        self._mark_delete = position
        self._index.trim_up_to(position)
        for bucket in [b for b in self._buckets if b.end_ledger_id < position.ledger_id]:
            self._remove_bucket(bucket)
            self._calls.delete(bucket.bucket_id, bucket.bucket_key, self._remove_property)
        self._drop_buckets_if_index_empty()

    def clear(self) -> None:
        """Delete every snapshot and forget everything (subscription deleted, backlog cleared)."""
        for bucket in list(self._buckets):
            self._remove_bucket(bucket)
            self._calls.delete(bucket.bucket_id, bucket.bucket_key, self._remove_property)
        self._calls.retry_pending_deletes(self._remove_property)
        self._reset_memory()

    def close(self) -> None:
        """Drop the in-memory state; snapshots and their properties stay for ``recover``."""
        self._buckets = []
        self._bucket_starts = []
        self._reset_memory()

    def _reset_memory(self) -> None:
        self._mutable.clear()
        self._shared.clear()
        self._index.clear()
        self._triggers = {}
        self._load_retry_at_ms = None

    # -- cursor properties and metrics ---------------------------------------------------

    def take_property_changes(self) -> list[PropertyChange]:
        """Cursor property puts (value) and removals (None) to apply, in order, since last call."""
        changes, self._property_changes = self._property_changes, []
        return changes

    def bucket_properties(self) -> dict[str, int]:
        """The bucket properties the cursor should hold now."""
        return dict(self._properties)

    def metric_samples(self) -> list[MetricSample]:
        return self.stats.samples(
            bucket_total=len(self._buckets) + 1,
            index_loaded=len(self._shared) + len(self._mutable),
            snapshot_size_bytes=self.snapshot_size_bytes,
        )

    @property
    def snapshot_size_bytes(self) -> int:
        return sum(bucket.snapshot_length_bytes for bucket in self._buckets)

    @property
    def immutable_buckets(self) -> tuple[ImmutableBucket, ...]:
        return tuple(self._buckets)

    @property
    def last_mutable_bucket(self) -> MutableBucket:
        return self._mutable

    @property
    def loaded_index_count(self) -> int:
        return len(self._shared) + len(self._mutable)

    @property
    def pending_snapshot_deletes(self) -> dict[int, str]:
        return dict(self._calls.pending_deletes)

    def _put_property(self, key: str, bucket_id: int) -> None:
        self._properties[key] = bucket_id
        self._property_changes.append((key, bucket_id))

    def _remove_property(self, key: str, bucket_id: int) -> None:
        if self._properties.get(key) == bucket_id:
            del self._properties[key]
            self._property_changes.append((key, None))

    # -- bucket bookkeeping -------------------------------------------------------------

    def _find_immutable_bucket(self, ledger_id: int) -> ImmutableBucket | None:
        i = bisect_right(self._bucket_starts, ledger_id) - 1
        if i >= 0 and self._buckets[i].end_ledger_id >= ledger_id:
            return self._buckets[i]
        return None

    def _insert_bucket(self, bucket: ImmutableBucket) -> None:
        i = bisect_left(self._bucket_starts, bucket.start_ledger_id)
        self._buckets.insert(i, bucket)
        self._bucket_starts.insert(i, bucket.start_ledger_id)

    def _remove_bucket(self, bucket: ImmutableBucket) -> None:
        i = next(i for i, b in enumerate(self._buckets) if b is bucket)
        del self._buckets[i]
        del self._bucket_starts[i]
        if bucket.trigger_key is not None and self._triggers.get(bucket.trigger_key) is bucket:
            del self._triggers[bucket.trigger_key]
        bucket.trigger_key = None

    def _drop_buckets_if_index_empty(self) -> None:
        """Nothing tracked means every queued copy and snapshot segment is stale: free them."""
        if len(self._index) or not (self._buckets or self._shared or len(self._mutable)):
            return
        for bucket in list(self._buckets):
            self._remove_bucket(bucket)
            self._calls.delete(bucket.bucket_id, bucket.bucket_key, self._remove_property)
        self._reset_memory()

    # -- segments ------------------------------------------------------------------------

    def _enqueue_segment(
        self, bucket: ImmutableBucket, segment: SnapshotSegment, check_acknowledged: bool = True
    ) -> bool:
        """Queue the still-tracked indexes of a segment; False if none is left."""
        index, shared = self._index, self._shared
        is_acknowledged = self._is_acknowledged if check_acknowledged else None
        last_key = None
        for key in segment.packed_keys():
            ledger_id, entry_id = key_position(key)
            if not index.contains(ledger_id, entry_id):
                continue
            if is_acknowledged is not None and is_acknowledged(ledger_id, entry_id):
                index.untrack(ledger_id, entry_id)
                continue
            shared.add_key(key)
            last_key = key
        if last_key is None:
            return False
        bucket.trigger_key = last_key
        self._triggers[last_key] = bucket
        return True

    def _advance_bucket(self, bucket: ImmutableBucket, key: int, now_ms: int) -> bool:
        """The last index of a bucket's segment is due: load the next. False: retry later."""
        if self._load_retry_at_ms is not None and now_ms < self._load_retry_at_ms:
            return False
        del self._triggers[key]
        bucket.trigger_key = None
        if self._load_next_segment(bucket):
            self._load_retry_at_ms = None
            return True
        self._triggers[key] = bucket
        bucket.trigger_key = key
        self._load_retry_at_ms = now_ms + max(self._tick_time_ms, 1)
        return False

    def _load_next_segment(self, bucket: ImmutableBucket) -> bool:
        """Load segments until one still has tracked indexes; delete the bucket when done."""
        while bucket.has_unloaded_segments():
            segment_entry_id = bucket.current_segment_entry_id + 1
            try:
                segments = self._calls.read_segments(OpType.LOAD, bucket.bucket_id, segment_entry_id, segment_entry_id)
            except STORAGE_ERRORS:
                return False
            bucket.current_segment_entry_id = segment_entry_id
            if segments and self._enqueue_segment(bucket, segments[0]):
                return True
        self._remove_bucket(bucket)
        self._calls.delete(bucket.bucket_id, bucket.bucket_key, self._remove_property)
        return True

    # -- sealing and merging ---------------------------------------------------------------

    def _seal_mutable_bucket(self) -> None:
        keys, start, end = self._mutable.seal()
        keys = self._still_tracked(keys)
        if not keys:
            return
        created = self._create_bucket(keys, start, end)
        if created is None:
            # The snapshot could not be written: keep these indexes in memory only.
            self._shared.add_keys(keys)
            return
        self._activate_bucket(*created)
        self._merge_if_needed()

    def _still_tracked(self, keys: Iterable[int]) -> list[int]:
        contains = self._index.contains
        return [key for key in keys if contains(*key_position(key))]

    def _create_bucket(self, keys: list[int], start: int, end: int) -> tuple[ImmutableBucket, SnapshotSegment] | None:
        """Write sorted indexes as a snapshot and record its property; None if storage failed."""
        metadata, segments = build_snapshot(keys, self._max_time_step_ms, self._max_indexes_per_segment)
        key = bucket_key(start, end)
        try:
            bucket_id = self._calls.run_op(
                OpType.CREATE,
                lambda: self._calls.storage.create_bucket_snapshot(
                    metadata, segments, key, self._topic_name, self._cursor_name
                ),
            )
        except STORAGE_ERRORS:
            return None
        bucket = ImmutableBucket(
            start_ledger_id=start,
            end_ledger_id=end,
            bucket_id=bucket_id,
            last_segment_entry_id=len(segments),
            current_segment_entry_id=1,
            number_bucket_delayed_messages=len(keys),
            first_schedule_timestamps=[segment.min_schedule_timestamp for segment in metadata.metadata_list],
            snapshot_length_bytes=self._calls.snapshot_length(bucket_id),
        )
        self._put_property(key, bucket_id)
        return bucket, segments[0]

    def _activate_bucket(self, bucket: ImmutableBucket, first_segment: SnapshotSegment) -> None:
        """Start serving a just-written bucket from its first segment (all of it is tracked)."""
        self._insert_bucket(bucket)
        queued = self._enqueue_segment(bucket, first_segment, check_acknowledged=False)
        assert queued, "a new bucket is built from tracked indexes only"

    def _merge_if_needed(self) -> None:
        if self._max_num_buckets <= 0:
            return
        while len(self._buckets) > self._max_num_buckets:
            buckets = self._buckets
            i = select_merged_buckets(
                [bucket.number_bucket_delayed_messages for bucket in buckets],
                [bucket.has_unloaded_segments() for bucket in buckets],
            )
            if i is None or not self._merge_buckets(buckets[i], buckets[i + 1]):
                return

    def _merge_buckets(self, first: ImmutableBucket, second: ImmutableBucket) -> bool:
        """Replace two adjacent buckets by one snapshot of their still-tracked indexes.

        The loaded segment of each is read back too: its undelivered indexes are in the
        shared queue but must be in the merged snapshot, or a restart would lose them. The
        copies this puts in the queue twice are dropped when they pop.
        """
        self.stats.record_trigger(OpType.MERGE)
        started_ms = self._calls.now_for_latency()
        try:
            remaining = [self._remaining_keys(bucket) for bucket in (first, second)]
        except STORAGE_ERRORS:
            self.stats.record_failure(OpType.MERGE)
            return False
        keys = self._still_tracked(heapq.merge(*remaining))
        created = self._create_bucket(keys, first.start_ledger_id, second.end_ledger_id) if keys else None
        if keys and created is None:
            self.stats.record_failure(OpType.MERGE)
            return False
        for bucket in (first, second):
            self._remove_bucket(bucket)
            self._calls.delete(bucket.bucket_id, bucket.bucket_key, self._remove_property)
        if created is not None:
            self._activate_bucket(*created)
        self.stats.record_success(OpType.MERGE, self._calls.latency_since(started_ms))
        return True

    def _remaining_keys(self, bucket: ImmutableBucket) -> Iterable[int]:
        segments = self._calls.read_segments(
            None, bucket.bucket_id, bucket.current_segment_entry_id, bucket.last_segment_entry_id
        )
        return chain.from_iterable(segment.packed_keys() for segment in segments)

def _split_overlaps(
    found: list[tuple[int, int, int, str]],
) -> tuple[list[tuple[int, int, int, str]], list[tuple[int, int, int, str]]]:
    """Buckets to recover, and stale ones enclosed by another (inputs of a finished merge)."""
    accepted: list[tuple[int, int, int, str]] = []
    stale: list[tuple[int, int, int, str]] = []
    for item in sorted(found, key=lambda f: (f[0], -f[1])):
        start, end = item[0], item[1]
        if accepted and start <= accepted[-1][1]:
            if end > accepted[-1][1]:
                raise RecoverDelayedDeliveryTrackerError(
                    f"delayed bucket {item[3]} partly overlaps {accepted[-1][3]}; the cursor properties are corrupt"
                )
            stale.append(item)
        else:
            accepted.append(item)
    return accepted, stale


def clean_residual_snapshots(properties: Mapping[str, int | str], storage: BucketSnapshotStorage) -> list[str]:
    """Delete the snapshots named in a cursor's properties without a tracker (the cursor is
    going away). Returns the property keys whose snapshots are gone; the rest failed."""
    removed = []
    for key, value in properties.items():
        if not is_bucket_key(key):
            continue
        try:
            storage.delete_bucket_snapshot(int(value))
        except BucketNotExistError:
            pass
        except (*STORAGE_ERRORS, ValueError):
            continue
        removed.append(key)
    return removed
