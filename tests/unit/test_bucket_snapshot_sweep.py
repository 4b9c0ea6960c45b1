"""Snapshots a crash left unlisted (written, but the cursor listing them never stored) go at start."""

from __future__ import annotations

from pathlib import Path

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.bucket import build_snapshot
from magnetar.core.delayed.triple_long_priority_queue import pack
from magnetar.core.positions import BEFORE_START
from magnetar.server.broker_service import BrokerService
from magnetar.server.bucket_snapshot_sweep import sweep_orphan_snapshots
from magnetar.storage.metadata_store import CursorRecord

TOPIC = "persistent://public/default/t"


def store_snapshot(broker: BrokerService, cursor: str) -> int:
    metadata, segments = build_snapshot([pack(100, 1, 0), pack(200, 1, 1)], 300_000, 5000)
    return broker.bucket_snapshot_storage.create_bucket_snapshot(metadata, segments, "k", TOPIC, cursor)


def test_only_snapshots_a_stored_cursor_lists_survive(tmp_path: Path) -> None:
    broker = BrokerService(BrokerConfig(), tmp_path / "data")
    listed = store_snapshot(broker, "s")
    unlisted = store_snapshot(broker, "s")
    orphan = store_snapshot(broker, "gone")
    broker.metadata.put_cursor(TOPIC, "s", CursorRecord(
        mark_delete=BEFORE_START, properties={"#pulsar.internal.delayed.bucket_1_1": listed, "other": "x"}))
    assert sweep_orphan_snapshots(broker) == 2
    assert broker.bucket_snapshot_storage.bucket_ids() == [listed]
    assert unlisted != orphan
    assert sweep_orphan_snapshots(broker) == 0
    broker.metadata.close()


def test_nothing_to_do_without_snapshots(tmp_path: Path) -> None:
    broker = BrokerService(BrokerConfig(), tmp_path / "data")
    assert sweep_orphan_snapshots(broker) == 0
    assert not (tmp_path / "data" / "buckets").exists()
    broker.metadata.close()
