"""Bucket snapshots in Magnetar's own ledgers: written once, read back by segment, deleted whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.core.delayed.bucket import build_snapshot
from magnetar.core.delayed.bucket_snapshot_storage import BucketNotExistError, BucketSnapshotError
from magnetar.core.delayed.triple_long_priority_queue import pack
from magnetar.storage.ledger_bucket_snapshot_storage import LedgerBucketSnapshotStorage
from magnetar.storage.metadata_store import MetadataStore

KEYS = [pack(1_000 + i, 3, i) for i in range(12)]


def open_storage(tmp_path: Path) -> tuple[LedgerBucketSnapshotStorage, MetadataStore]:
    metadata = MetadataStore(tmp_path / "metadata.db")
    return LedgerBucketSnapshotStorage(tmp_path / "buckets", metadata), metadata


def files(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "buckets").rglob("*") if p.is_file())


def test_a_snapshot_reads_back_after_a_restart_and_is_deleted_whole(tmp_path: Path) -> None:
    storage, metadata = open_storage(tmp_path)
    snapshot, segments = build_snapshot(KEYS, 300_000, 5)
    bucket_id = storage.create_bucket_snapshot(snapshot, segments, "k", "persistent://t/n/x", "sub")
    written = files(tmp_path)
    metadata.close()

    storage, metadata = open_storage(tmp_path)
    assert storage.bucket_ids() == [bucket_id]
    assert storage.owners() == {bucket_id: ("persistent://t/n/x", "sub")}
    assert storage.get_bucket_snapshot_metadata(bucket_id) == snapshot
    assert storage.get_bucket_snapshot_segment(bucket_id, 1, len(segments)) == segments
    assert storage.get_bucket_snapshot_length(bucket_id) > 0
    for _ in range(3):
        storage.get_bucket_snapshot_segment(bucket_id, 2, 2)
    assert files(tmp_path) == written, "reading a snapshot creates no ledger files"
    storage.delete_bucket_snapshot(bucket_id)
    assert storage.bucket_ids() == [] and files(tmp_path) == []
    with pytest.raises(BucketNotExistError):
        storage.get_bucket_snapshot_metadata(bucket_id)
    with pytest.raises(BucketNotExistError):
        storage.delete_bucket_snapshot(bucket_id)
    metadata.close()


def test_a_damaged_snapshot_entry_fails_its_read(tmp_path: Path) -> None:
    storage, metadata = open_storage(tmp_path)
    snapshot, segments = build_snapshot(KEYS, 300_000, 5)
    bucket_id = storage.create_bucket_snapshot(snapshot, segments, "k", "t", "s")
    [segment_file] = [p for p in files(tmp_path) if p.stat().st_size > 100]
    raw = bytearray(segment_file.read_bytes())
    raw[-1] ^= 0xFF
    segment_file.write_bytes(bytes(raw))
    storage, _ = open_storage(tmp_path)
    with pytest.raises(BucketSnapshotError):
        storage.get_bucket_snapshot_segment(bucket_id, len(segments), len(segments))
    metadata.close()


def test_written_behind_a_snapshot_is_served_from_memory_until_the_background_stores_it(tmp_path: Path) -> None:
    metadata = MetadataStore(tmp_path / "metadata.db")
    queued: list[object] = []
    storage = LedgerBucketSnapshotStorage(tmp_path / "buckets", metadata, background=queued.append)
    snapshot, segments = build_snapshot(KEYS, 300_000, 5)
    bucket_id = storage.create_bucket_snapshot(snapshot, segments, "k", "persistent://t/n/x", "sub")
    assert files(tmp_path) == [] and storage.bucket_ids() == []  # nothing on disk yet
    assert storage.get_bucket_snapshot_metadata(bucket_id) == snapshot
    assert storage.get_bucket_snapshot_segment(bucket_id, 1, len(segments)) == segments
    length = storage.get_bucket_snapshot_length(bucket_id)
    writer = MetadataStore(tmp_path / "metadata.db")  # the background's own connection
    for task in queued:
        task(writer)  # type: ignore[operator]
    queued.clear()
    assert files(tmp_path) != [] and storage.bucket_ids() == [bucket_id]
    assert storage.get_bucket_snapshot_segment(bucket_id, 1, len(segments)) == segments
    assert storage.get_bucket_snapshot_length(bucket_id) == length
    storage.delete_bucket_snapshot(bucket_id)
    assert files(tmp_path) != []  # deleted behind too
    for task in queued:
        task(writer)  # type: ignore[operator]
    assert files(tmp_path) == [] and storage.bucket_ids() == []
    writer.close()
    metadata.close()
