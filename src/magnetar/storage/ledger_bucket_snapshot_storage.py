"""Bucket snapshots of delayed-message indexes, kept in Magnetar's own ledgers (PIP-195).

Each snapshot is a managed ledger of its own: entry 0 holds the metadata (per-segment
bitmaps and schedule times), entries 1..n the segments, so a segment is read back
with one entry read. The bucket id is a broker-wide ledger id from the metadata store;
a registry key per snapshot (``delayed-bucket/<id>``) names its owner, so what storage
holds can be listed and nothing leaks unseen.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from magnetar.core.delayed.bucket_snapshot_storage import BucketNotExistError, BucketSnapshotPersistenceError
from magnetar.core.delayed.snapshot_format import (
    SnapshotMetadata,
    SnapshotSegment,
    decode_metadata,
    decode_segment,
    encode_metadata,
    encode_segment,
)
from magnetar.core.positions import Position
from magnetar.storage.interfaces import LedgerConfig, StorageError
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory

REGISTRY_PREFIX = "delayed-bucket/"


class LedgerBucketSnapshotStorage:
    def __init__(self, data_dir: Path, metadata: MetadataStore) -> None:
        self.metadata = metadata
        self.factory = SegmentLedgerFactory(data_dir, metadata.next_ledger_id, LedgerConfig(
            max_entries_per_ledger=1_000_000, cache_max_entries=16, cache_max_bytes=1 << 20))
        self._open: dict[int, SegmentLedger] = {}

    def create_bucket_snapshot(self, snapshot_metadata: SnapshotMetadata,
                               bucket_snapshot_segments: Sequence[SnapshotSegment],
                               bucket_key: str, topic_name: str, cursor_name: str) -> int:
        bucket_id = self.metadata.next_ledger_id()
        try:
            ledger = self.factory.open(self._name(bucket_id))
            ledger.append(encode_metadata(snapshot_metadata))
            for segment in bucket_snapshot_segments:
                ledger.append(encode_segment(segment))
            ledger.sync()
        except (OSError, StorageError) as exc:
            raise BucketSnapshotPersistenceError(f"cannot write bucket snapshot {bucket_id}: {exc}") from exc
        self._open[bucket_id] = ledger
        self.metadata.put_json(f"{REGISTRY_PREFIX}{bucket_id}",
                               {"topic": topic_name, "cursor": cursor_name, "bucketKey": bucket_key})
        return bucket_id

    def get_bucket_snapshot_metadata(self, bucket_id: int) -> SnapshotMetadata:
        return decode_metadata(self._read(bucket_id, 0))

    def get_bucket_snapshot_segment(self, bucket_id: int, first_segment_entry_id: int,
                                    last_segment_entry_id: int) -> list[SnapshotSegment]:
        return [decode_segment(self._read(bucket_id, i))
                for i in range(first_segment_entry_id, last_segment_entry_id + 1)]

    def get_bucket_snapshot_length(self, bucket_id: int) -> int:
        return self._ledger(bucket_id).total_size_bytes()

    def delete_bucket_snapshot(self, bucket_id: int) -> None:
        ledger = self._ledger(bucket_id)
        try:
            ledger.delete()
        except (OSError, StorageError) as exc:
            raise BucketSnapshotPersistenceError(f"cannot delete bucket snapshot {bucket_id}: {exc}") from exc
        self._open.pop(bucket_id, None)
        self.metadata.delete(f"{REGISTRY_PREFIX}{bucket_id}")

    def bucket_ids(self) -> list[int]:
        """Every snapshot storage holds, for leak checks and admin listings."""
        return sorted(int(key[len(REGISTRY_PREFIX):]) for key in self.metadata.list_prefix(REGISTRY_PREFIX))

    def close(self) -> None:
        for ledger in self._open.values():
            ledger.close()
        self._open.clear()

    def _name(self, bucket_id: int) -> str:
        return f"__delayed_bucket_snapshot/{bucket_id}"

    def _ledger(self, bucket_id: int) -> SegmentLedger:
        ledger = self._open.get(bucket_id)
        if ledger is not None:
            return ledger
        if self.metadata.get_json(f"{REGISTRY_PREFIX}{bucket_id}") is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} does not exist")
        ledger = self.factory.open(self._name(bucket_id))
        self._open[bucket_id] = ledger
        return ledger

    def _read(self, bucket_id: int, index: int) -> bytes:
        ledger = self._ledger(bucket_id)
        first = ledger.first_position()
        if first is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} is empty")
        pos = first
        for _ in range(index):
            pos = ledger.next_position(pos)
        try:
            return ledger.read(Position(pos.ledger_id, pos.entry_id))
        except KeyError:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} has no entry {index}") from None
