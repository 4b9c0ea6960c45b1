"""The bucket tracker's calls to snapshot storage: retried on transient failures, timed and
counted for the snapshot-operation metrics, and deletes that failed kept to retry later.

Storage calls are synchronous; a failure the retries do not cure is raised to the tracker,
except for deletes, which keep the bucket's snapshot (and its cursor property) until a
later retry removes both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from magnetar.core.delayed.bucket_delayed_message_index_stats import BucketDelayedMessageIndexStats, OpType
from magnetar.core.delayed.bucket_snapshot_storage import (
    BucketNotExistError,
    BucketSnapshotError,
    BucketSnapshotPersistenceError,
    BucketSnapshotStorage,
)
from magnetar.core.delayed.snapshot_format import SnapshotFormatError, SnapshotSegment

#: retries after a transient storage failure (Pulsar's ``Bucket.MaxRetryTimes``)
MAX_RETRY_TIMES = 3
STORAGE_ERRORS = (BucketSnapshotError, SnapshotFormatError)

_T = TypeVar("_T")


class SnapshotCalls:
    def __init__(self, storage: BucketSnapshotStorage, stats: BucketDelayedMessageIndexStats,
                 latency_clock_ms: Callable[[], float] | None) -> None:
        self.storage = storage
        self._stats = stats
        #: only read to time operations for the latency metric
        self._latency_clock_ms = latency_clock_ms
        #: bucket id -> property key of snapshots whose delete failed
        self.pending_deletes: dict[int, str] = {}

    def with_retry(self, call: Callable[[], _T]) -> _T:
        for _ in range(MAX_RETRY_TIMES):
            try:
                return call()
            except BucketSnapshotPersistenceError:
                continue
        return call()

    def now_for_latency(self) -> float | None:
        return self._latency_clock_ms() if self._latency_clock_ms is not None else None

    def latency_since(self, started_ms: float | None) -> float | None:
        if started_ms is None or self._latency_clock_ms is None:
            return None
        return self._latency_clock_ms() - started_ms

    def run_op(self, op_type: OpType, call: Callable[[], _T]) -> _T:
        self._stats.record_trigger(op_type)
        started_ms = self.now_for_latency()
        try:
            result = self.with_retry(call)
        except STORAGE_ERRORS:
            self._stats.record_failure(op_type)
            raise
        self._stats.record_success(op_type, self.latency_since(started_ms))
        return result

    def read_segments(self, op_type: OpType | None, bucket_id: int, first: int, last: int) -> list[SnapshotSegment]:
        def read() -> list[SnapshotSegment]:
            return self.storage.get_bucket_snapshot_segment(bucket_id, first, last)

        return self.with_retry(read) if op_type is None else self.run_op(op_type, read)

    def snapshot_length(self, bucket_id: int) -> int:
        try:
            return self.with_retry(lambda: self.storage.get_bucket_snapshot_length(bucket_id))
        except STORAGE_ERRORS:
            return 0

    def delete(self, bucket_id: int, key: str, deleted: Callable[[str, int], None]) -> None:
        """Delete a snapshot, then ``deleted(key, bucket_id)`` (its property goes); on
        failure keep both and retry later."""

        def delete() -> None:
            try:
                self.storage.delete_bucket_snapshot(bucket_id)
            except BucketNotExistError:
                pass

        try:
            self.run_op(OpType.DELETE, delete)
        except STORAGE_ERRORS:
            self.pending_deletes[bucket_id] = key
            return
        self.pending_deletes.pop(bucket_id, None)
        deleted(key, bucket_id)

    def retry_pending_deletes(self, deleted: Callable[[str, int], None]) -> None:
        for bucket_id, key in list(self.pending_deletes.items()):
            self.delete(bucket_id, key, deleted)
