"""Deleting bucket snapshots no cursor lists, once when the broker starts.

A tracker writes a snapshot first and lists it in its cursor's properties after; the
cursor reaches the metadata store at the next persist. A kill -9 in between leaves a
snapshot nobody will read: its messages were only in memory before, so the restart
re-reads and re-indexes them. Before any topic opens (nothing writes snapshots yet),
every stored snapshot whose owning cursor is gone or does not list it is deleted, so
crashes leak no storage.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.core.delayed.bucket import is_bucket_key
from magnetar.core.delayed.bucket_snapshot_storage import BucketNotExistError, BucketSnapshotError

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.delayed")


def listed_buckets(properties: dict[str, int | str]) -> set[int]:
    listed = set()
    for key, value in properties.items():
        if is_bucket_key(key):
            try:
                listed.add(int(value))
            except ValueError:
                continue
    return listed


def sweep_orphan_snapshots(broker: BrokerShell) -> int:
    """Delete unlisted snapshots; how many went. Call before any topic is opened."""
    if not (broker.data_dir / "buckets").exists():
        return 0
    storage = broker.bucket_snapshot_storage
    listed: dict[tuple[str, str], set[int]] = {}
    deleted = 0
    for bucket_id, owner in sorted(storage.owners().items()):
        if owner not in listed:
            record = broker.metadata.get_cursor(*owner)
            listed[owner] = listed_buckets(record.properties) if record is not None else set()
        if bucket_id in listed[owner]:
            continue
        try:
            storage.delete_bucket_snapshot(bucket_id)
        except BucketNotExistError:
            pass
        except BucketSnapshotError:
            log.warning("cannot delete unlisted delayed bucket snapshot %d", bucket_id, exc_info=True)
            continue
        deleted += 1
    if deleted:
        log.info("deleted %d delayed bucket snapshots no cursor lists (left by a crash)", deleted)
    return deleted
