"""What every delayed-index bucket shares: its cursor-property key, and how a run of sorted
indexes becomes a snapshot of segments (PIP-195; Pulsar's ``Bucket`` and ``MutableBucket``).

A bucket covers a closed range of ledger ids. Its snapshot id is kept as a cursor property
``#pulsar.internal.delayed.bucket_<startLedgerId>_<endLedgerId>`` -> bucket id, so a
restarted tracker finds its buckets again (the same key Pulsar writes).

Segments are cut from the index stream sorted by (time, ledger, entry): a segment ends when
the next index is more than ``delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds``
after the segment's first one, or when it holds
``delayedDeliveryMaxIndexesPerBucketSnapshotSegment`` indexes (-1: no limit).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

from pyroaring import BitMap

from magnetar.core.delayed.snapshot_format import SnapshotMetadata, SnapshotSegment, SnapshotSegmentMetadata
from magnetar.core.delayed.triple_long_priority_queue import unpack

#: ``ManagedCursor.CURSOR_INTERNAL_PROPERTY_PREFIX`` + "delayed.bucket".
DELAYED_BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket"
DELIMITER = "_"

#: Pulsar's ``delayedDeliveryMinIndexCountPerBucket`` default.
DEFAULT_MIN_INDEX_COUNT_PER_BUCKET = 50_000
#: Pulsar's ``delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds`` default.
DEFAULT_MAX_TIME_STEP_PER_BUCKET_SNAPSHOT_SEGMENT_SECONDS = 300
#: Pulsar's ``delayedDeliveryMaxIndexesPerBucketSnapshotSegment`` default.
DEFAULT_MAX_INDEXES_PER_BUCKET_SNAPSHOT_SEGMENT = 5_000
#: Pulsar's ``delayedDeliveryMaxNumBuckets`` default: -1, never merge.
DEFAULT_MAX_NUM_BUCKETS = -1
#: Buckets merged at a time. PIP-195 merges the two adjacent buckets with the fewest indexes.
MERGE_NUM = 2


def bucket_key(start_ledger_id: int, end_ledger_id: int) -> str:
    return DELIMITER.join((DELAYED_BUCKET_KEY_PREFIX, str(start_ledger_id), str(end_ledger_id)))


def is_bucket_key(key: str) -> bool:
    return key.startswith(DELAYED_BUCKET_KEY_PREFIX)


def parse_bucket_key(key: str) -> tuple[int, int]:
    """``(start_ledger_id, end_ledger_id)`` of a bucket key; ValueError if it is not one."""
    parts = key.split(DELIMITER)
    if len(parts) != 3 or parts[0] != DELAYED_BUCKET_KEY_PREFIX:
        raise ValueError(f"{key!r} is not a delayed bucket key ({DELAYED_BUCKET_KEY_PREFIX}_<start>_<end>)")
    start, end = int(parts[1]), int(parts[2])
    if start > end:
        raise ValueError(f"delayed bucket key {key!r} has start ledger after end ledger")
    return start, end


def select_merged_buckets(counts: Sequence[int], eligible: Sequence[bool], merge_num: int = MERGE_NUM) -> int | None:
    """Index of the first of ``merge_num`` adjacent eligible buckets with the fewest indexes.

    Ties go to the leftmost (oldest ledgers) run. None if no run of eligible buckets exists.
    PIP-195's example: counts [5, 3, 2, 4, 3] merge the second and third (index 1).
    """
    best: int | None = None
    best_total = 0
    for start in range(len(counts) - merge_num + 1):
        window = range(start, start + merge_num)
        if not all(eligible[i] for i in window):
            continue
        total = sum(counts[i] for i in window)
        if best is None or total < best_total:
            best, best_total = start, total
    return best


class _SegmentBuilder:
    """Accumulates one segment's columns and per-ledger bitmaps."""

    def __init__(self) -> None:
        self.timestamps: array[int] = array("q")
        self.ledger_ids: array[int] = array("Q")
        self.entry_ids: array[int] = array("I")
        self.bitmaps: dict[int, BitMap] = {}

    def __len__(self) -> int:
        return len(self.timestamps)

    def add(self, timestamp: int, ledger_id: int, entry_id: int) -> None:
        self.timestamps.append(timestamp)
        self.ledger_ids.append(ledger_id)
        self.entry_ids.append(entry_id)
        bitmap = self.bitmaps.get(ledger_id)
        if bitmap is None:
            bitmap = self.bitmaps[ledger_id] = BitMap()
        bitmap.add(entry_id)

    def finish(self) -> tuple[SnapshotSegmentMetadata, SnapshotSegment]:
        metadata = SnapshotSegmentMetadata(self.bitmaps, self.timestamps[-1], self.timestamps[0])
        return metadata, SnapshotSegment(self.timestamps, self.ledger_ids, self.entry_ids)


def build_snapshot(
    sorted_keys: Iterable[int],
    max_time_step_ms: int,
    max_indexes_per_segment: int,
) -> tuple[SnapshotMetadata, list[SnapshotSegment]]:
    """Cut sorted packed keys into segments; every segment holds at least one index."""
    metadata_list: list[SnapshotSegmentMetadata] = []
    segments: list[SnapshotSegment] = []
    builder = _SegmentBuilder()
    upper_limit = 0
    for key in sorted_keys:
        timestamp, ledger_id, entry_id = unpack(key)
        if len(builder) and timestamp > upper_limit:
            _close(builder, metadata_list, segments)
            builder = _SegmentBuilder()
        if not len(builder):
            upper_limit = timestamp + max_time_step_ms - 1
        builder.add(timestamp, ledger_id, entry_id)
        if max_indexes_per_segment != -1 and len(builder) >= max_indexes_per_segment:
            _close(builder, metadata_list, segments)
            builder = _SegmentBuilder()
    if len(builder):
        _close(builder, metadata_list, segments)
    return SnapshotMetadata(tuple(metadata_list)), segments


def _close(
    builder: _SegmentBuilder,
    metadata_list: list[SnapshotSegmentMetadata],
    segments: list[SnapshotSegment],
) -> None:
    metadata, segment = builder.finish()
    metadata_list.append(metadata)
    segments.append(segment)
