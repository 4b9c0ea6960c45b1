"""Where bucket snapshots live: Pulsar's ``BucketSnapshotStorage`` and an in-memory twin.

A snapshot is written once (metadata plus segments), read back piecemeal (metadata, then
one segment at a time), and deleted whole. ``create_bucket_snapshot`` returns the bucket
id the tracker records in the cursor properties. Calls are synchronous from the core's
view; the storage implementation backed by the broker's ledgers does its own I/O.

Errors: ``BucketSnapshotPersistenceError`` is transient and worth a retry;
``BucketNotExistError`` means the id names nothing (already deleted, or never written).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar.core.delayed.snapshot_format import (
    SnapshotMetadata,
    SnapshotSegment,
    decode_metadata,
    decode_segment,
    snapshot_entries,
)


class BucketSnapshotError(Exception):
    """A bucket snapshot operation failed."""


class BucketSnapshotPersistenceError(BucketSnapshotError):
    """The storage could not complete the operation now; retrying may succeed."""


class BucketNotExistError(BucketSnapshotError):
    """No snapshot has this bucket id."""


@runtime_checkable
class BucketSnapshotStorage(Protocol):
    def create_bucket_snapshot(
        self,
        snapshot_metadata: SnapshotMetadata,
        bucket_snapshot_segments: Sequence[SnapshotSegment],
        bucket_key: str,
        topic_name: str,
        cursor_name: str,
    ) -> int:
        """Store a snapshot; returns its bucket id. Key, topic and cursor name the owner."""
        ...

    def get_bucket_snapshot_metadata(self, bucket_id: int) -> SnapshotMetadata: ...

    def get_bucket_snapshot_segment(
        self, bucket_id: int, first_segment_entry_id: int, last_segment_entry_id: int
    ) -> list[SnapshotSegment]:
        """Segments ``first..last`` inclusive; segment entry ids start at 1."""
        ...

    def get_bucket_snapshot_length(self, bucket_id: int) -> int:
        """Total stored bytes of the snapshot."""
        ...

    def delete_bucket_snapshot(self, bucket_id: int) -> None: ...


@dataclass(frozen=True)
class StoredBucketSnapshot:
    """One snapshot as the memory storage holds it: entry 0 is the metadata."""

    bucket_id: int
    bucket_key: str
    topic_name: str
    cursor_name: str
    entries: tuple[bytes, ...]

    @property
    def length_bytes(self) -> int:
        return sum(len(entry) for entry in self.entries)


class MemoryBucketSnapshotStorage:
    """Snapshots kept as encoded bytes in a dict, with failure injection for tests."""

    def __init__(self) -> None:
        self._snapshots: dict[int, StoredBucketSnapshot] = {}
        self._next_bucket_id = 1
        self._failures: dict[str, deque[BucketSnapshotError]] = {
            "create": deque(),
            "get_metadata": deque(),
            "get_segment": deque(),
            "get_length": deque(),
            "delete": deque(),
        }
        self.calls: dict[str, int] = dict.fromkeys(self._failures, 0)

    # -- what it holds ----------------------------------------------------------------

    def bucket_ids(self) -> list[int]:
        return sorted(self._snapshots)

    def snapshots(self) -> list[StoredBucketSnapshot]:
        return [self._snapshots[bucket_id] for bucket_id in sorted(self._snapshots)]

    def total_bytes(self) -> int:
        return sum(snapshot.length_bytes for snapshot in self._snapshots.values())

    def inject_failure(self, operation: str, error: BucketSnapshotError | None = None, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` raise (a transient error by default)."""
        queue = self._failures[operation]
        for _ in range(times):
            queue.append(error or BucketSnapshotPersistenceError(f"injected {operation} failure"))

    def pending_failures(self, operation: str) -> int:
        return len(self._failures[operation])

    def clear_failures(self) -> None:
        for queue in self._failures.values():
            queue.clear()

    def _enter(self, operation: str) -> None:
        self.calls[operation] += 1
        queue = self._failures[operation]
        if queue:
            raise queue.popleft()

    def _get(self, bucket_id: int) -> StoredBucketSnapshot:
        snapshot = self._snapshots.get(bucket_id)
        if snapshot is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} does not exist")
        return snapshot

    # -- BucketSnapshotStorage ----------------------------------------------------------

    def create_bucket_snapshot(
        self,
        snapshot_metadata: SnapshotMetadata,
        bucket_snapshot_segments: Sequence[SnapshotSegment],
        bucket_key: str,
        topic_name: str,
        cursor_name: str,
    ) -> int:
        self._enter("create")
        entries = tuple(snapshot_entries(snapshot_metadata, bucket_snapshot_segments))
        bucket_id = self._next_bucket_id
        self._next_bucket_id += 1
        self._snapshots[bucket_id] = StoredBucketSnapshot(bucket_id, bucket_key, topic_name, cursor_name, entries)
        return bucket_id

    def get_bucket_snapshot_metadata(self, bucket_id: int) -> SnapshotMetadata:
        self._enter("get_metadata")
        return decode_metadata(self._get(bucket_id).entries[0])

    def get_bucket_snapshot_segment(
        self, bucket_id: int, first_segment_entry_id: int, last_segment_entry_id: int
    ) -> list[SnapshotSegment]:
        self._enter("get_segment")
        entries = self._get(bucket_id).entries
        if not 1 <= first_segment_entry_id <= last_segment_entry_id < len(entries):
            raise BucketSnapshotError(
                f"bucket snapshot {bucket_id} has segments 1..{len(entries) - 1}, "
                f"not {first_segment_entry_id}..{last_segment_entry_id}"
            )
        return [decode_segment(entries[i]) for i in range(first_segment_entry_id, last_segment_entry_id + 1)]

    def get_bucket_snapshot_length(self, bucket_id: int) -> int:
        self._enter("get_length")
        return self._get(bucket_id).length_bytes

    def delete_bucket_snapshot(self, bucket_id: int) -> None:
        self._enter("delete")
        if self._snapshots.pop(bucket_id, None) is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} does not exist")
