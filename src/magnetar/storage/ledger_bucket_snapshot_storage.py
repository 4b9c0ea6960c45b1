"""Bucket snapshots of delayed-message indexes, kept in Magnetar's own ledgers (PIP-195).

Each snapshot is a managed ledger of its own: entry 0 holds the metadata (per-segment
bitmaps and schedule times), entries 1..n the segments, so a segment is read back
with one entry read. The bucket id is a broker-wide ledger id from the metadata store;
a registry key per snapshot (``delayed-bucket/<id>``) names its owner, so what storage
holds can be listed and nothing leaks unseen.

A snapshot never changes once written, so it is written through a managed ledger that is
closed at once, and read back straight from its segment files: opening it as a managed
ledger again would start a new, empty ledger file each time (a topic recovering hundreds
of buckets would create hundreds of files). Where each entry lies is learnt once per
snapshot, from the ledger's index file or a scan, and every read checks the entry's
checksum.

Writing a snapshot means fsyncs and deleting one an ``rmtree``: a broker passes
``background`` (its metadata-writer thread, which hands each task its own connection to
the store) so neither runs on the event loop. The snapshot is then served from memory
until it is on disk, and because the same thread later writes the cursor whose
properties list the bucket, that list never becomes durable before the snapshot does.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import google_crc32c

from magnetar.core.delayed import snapshot_format as fmt
from magnetar.core.delayed.bucket_snapshot_storage import (
    BucketNotExistError,
    BucketSnapshotError,
    BucketSnapshotPersistenceError,
)
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.storage.interfaces import LedgerConfig, StorageError
from magnetar.storage.segment_ledger import (
    RECORD,
    SegmentLedgerFactory,
    fsync_dir,
    load_segment_index,
    scan_segment,
    topic_dir_name,
)

REGISTRY_PREFIX = "delayed-bucket/"
log = logging.getLogger("magnetar.delayed")

#: (segment file, offset of the record, record length with its header) of one entry.
Span = tuple[Path, int, int]


#: Runs a task on another thread with that thread's own connection to the store.
Background = Callable[[Callable[[BrokerMetadataStore], None]], object]


class LedgerBucketSnapshotStorage:
    def __init__(self, data_dir: Path, metadata: BrokerMetadataStore, background: Background | None = None,
                 ledger_ids: Callable[[], int] | None = None) -> None:
        """``ledger_ids``: where bucket ids come from (the store's own counter by default)."""
        self.metadata = metadata
        self._next_id = ledger_ids or metadata.next_ledger_id
        # No entry cache: a snapshot is written once and each segment read back once.
        self.factory = SegmentLedgerFactory(data_dir, self._next_id, LedgerConfig(
            max_entries_per_ledger=1_000_000, cache_max_entries=0, cache_max_bytes=0))
        self._spans: dict[int, list[Span]] = {}
        self._background = background
        #: snapshots handed to the background and not yet on disk, served from here
        self._unwritten: dict[int, list[bytes]] = {}

    def create_bucket_snapshot(self, snapshot_metadata: fmt.SnapshotMetadata,
                               bucket_snapshot_segments: Sequence[fmt.SnapshotSegment],
                               bucket_key: str, topic_name: str, cursor_name: str) -> int:
        bucket_id = self._next_id()
        entries = fmt.snapshot_entries(snapshot_metadata, bucket_snapshot_segments)
        owner = {"topic": topic_name, "cursor": cursor_name, "bucketKey": bucket_key}
        if self._background is None:
            self._write(bucket_id, entries, owner, self.metadata)
            return bucket_id
        self._unwritten[bucket_id] = entries
        self._background(lambda store: self._write_behind(bucket_id, entries, owner, store))
        return bucket_id

    def _write_behind(self, bucket_id: int, entries: list[bytes], owner: dict[str, str],
                      store: BrokerMetadataStore) -> None:
        try:
            self._write(bucket_id, entries, owner, store)
        except BucketSnapshotError:
            log.exception("bucket snapshot %d was not stored; its indexes are read back from the topic", bucket_id)
        finally:
            self._unwritten.pop(bucket_id, None)

    def _write(self, bucket_id: int, entries: list[bytes], owner: dict[str, str], store: BrokerMetadataStore) -> None:
        try:
            ledger = self.factory.open(self._name(bucket_id))
            try:
                for entry in entries:
                    ledger.append(entry)
                ledger.flush()
                ledger.sync()
            finally:
                ledger.close()
        except (OSError, StorageError) as exc:
            raise BucketSnapshotPersistenceError(f"cannot write bucket snapshot {bucket_id}: {exc}") from exc
        store.put_json(f"{REGISTRY_PREFIX}{bucket_id}", owner)

    def get_bucket_snapshot_metadata(self, bucket_id: int) -> fmt.SnapshotMetadata:
        return fmt.decode_metadata(self._read(bucket_id, 0))

    def get_bucket_snapshot_segment(self, bucket_id: int, first_segment_entry_id: int,
                                    last_segment_entry_id: int) -> list[fmt.SnapshotSegment]:
        return [fmt.decode_segment(self._read(bucket_id, i))
                for i in range(first_segment_entry_id, last_segment_entry_id + 1)]

    def get_bucket_snapshot_length(self, bucket_id: int) -> int:
        unwritten = self._unwritten.get(bucket_id)
        if unwritten is not None:
            return sum(map(len, unwritten))
        return sum(length - RECORD.size for _, _, length in self._locate(bucket_id))

    def delete_bucket_snapshot(self, bucket_id: int) -> None:
        key = f"{REGISTRY_PREFIX}{bucket_id}"
        if bucket_id not in self._unwritten and self.metadata.get_json(key) is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} does not exist")
        self._spans.pop(bucket_id, None)
        if self._background is None:
            self._delete(bucket_id, self.metadata)
            return
        # after the write (same thread, in order); a failure leaves an orphan the start-up sweep removes
        self._background(lambda store: self._delete_behind(bucket_id, store))

    def _delete_behind(self, bucket_id: int, store: BrokerMetadataStore) -> None:
        try:
            self._delete(bucket_id, store)
        except BucketSnapshotError:
            log.exception("bucket snapshot %d was not deleted; the next start-up removes it", bucket_id)

    def _delete(self, bucket_id: int, store: BrokerMetadataStore) -> None:
        directory = self._directory(bucket_id)
        try:
            if directory.exists():
                shutil.rmtree(directory)
                fsync_dir(directory.parent)
        except OSError as exc:
            raise BucketSnapshotPersistenceError(f"cannot delete bucket snapshot {bucket_id}: {exc}") from exc
        store.delete(f"{REGISTRY_PREFIX}{bucket_id}")

    def bucket_ids(self) -> list[int]:
        """Every snapshot storage holds, for leak checks and admin listings."""
        return sorted(int(key[len(REGISTRY_PREFIX):]) for key in self.metadata.list_prefix(REGISTRY_PREFIX))

    def owners(self) -> dict[int, tuple[str, str]]:
        """Each stored snapshot's (topic, cursor), as recorded when it was created."""
        owners = {}
        for key in self.metadata.list_prefix(REGISTRY_PREFIX):
            entry = self.metadata.get_json(key) or {}
            owners[int(key[len(REGISTRY_PREFIX):])] = (str(entry.get("topic", "")), str(entry.get("cursor", "")))
        return owners

    def close(self) -> None:
        self._spans.clear()

    def _name(self, bucket_id: int) -> str:
        return f"__delayed_bucket_snapshot/{bucket_id}"

    def _directory(self, bucket_id: int) -> Path:
        return self.factory.data_dir / topic_dir_name(self._name(bucket_id))

    def _locate(self, bucket_id: int) -> list[Span]:
        """Where each entry of the snapshot lies, learnt on first use."""
        spans = self._spans.get(bucket_id)
        if spans is not None:
            return spans
        if self.metadata.get_json(f"{REGISTRY_PREFIX}{bucket_id}") is None:
            raise BucketNotExistError(f"bucket snapshot {bucket_id} does not exist")
        spans = []
        try:
            for path in sorted(self._directory(bucket_id).glob("*.seg")):
                ledger_id = int(path.name[:-4])
                scan = load_segment_index(path, ledger_id) or scan_segment(path, ledger_id)
                if scan is None:
                    continue
                ends = [*scan.offsets[1:], scan.good_end]
                spans += [(path, start, end - start) for start, end in zip(scan.offsets, ends, strict=True)]
        except (OSError, StorageError, ValueError) as exc:
            raise BucketSnapshotPersistenceError(f"cannot read bucket snapshot {bucket_id}: {exc}") from exc
        self._spans[bucket_id] = spans
        return spans

    def _read(self, bucket_id: int, index: int) -> bytes:
        unwritten = self._unwritten.get(bucket_id)
        if unwritten is not None:
            if not 0 <= index < len(unwritten):
                raise BucketNotExistError(f"bucket snapshot {bucket_id} has no entry {index}")
            return unwritten[index]
        spans = self._locate(bucket_id)
        if not 0 <= index < len(spans):
            raise BucketNotExistError(f"bucket snapshot {bucket_id} has no entry {index}")
        path, offset, length = spans[index]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                raw = os.pread(fd, length, offset)
            finally:
                os.close(fd)
        except OSError as exc:
            raise BucketSnapshotPersistenceError(f"cannot read bucket snapshot {bucket_id}: {exc}") from exc
        data = raw[RECORD.size:]
        if len(raw) != length or RECORD.unpack_from(raw) != (len(data), google_crc32c.value(data)):
            raise BucketSnapshotError(f"entry {index} of bucket snapshot {bucket_id} fails its checksum")
        return data
