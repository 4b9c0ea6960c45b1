"""``delayedDeliverySharedIndexEnabled``: two subscriptions share one bucket index, through a kill -9."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from e2e_helpers import quiet_logger, wait_until

from magnetar.testing.broker_process import BrokerProcess

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName":
        "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
    "delayedDeliverySharedIndexEnabled": "true",
    "delayedDeliveryMinIndexCountPerBucket": "10",
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": "5",
    "delayedDeliveryTickTimeMillis": "100",
    "managedLedgerMaxEntriesPerLedger": "20",
    "managedLedgerDefaultMarkDeleteRateLimit": "20",
}
INDEX_RECORD = "pulsar.delayed.index"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", CONFIG).start()
    yield proc
    proc.kill()


def snapshot_files(data_dir: Path) -> list[Path]:
    root = data_dir / "buckets"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def cursor_properties(data_dir: Path, topic: str) -> dict[str, dict[str, object]]:
    """Each stored cursor's properties, read from the metadata database beside the broker."""
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT name, properties FROM cursors WHERE topic = ?", (topic,)).fetchall()
    finally:
        db.close()
    return {name: json.loads(properties) for name, properties in rows}


def bucket_keys(properties: dict[str, object]) -> list[str]:
    return [key for key in properties if "delayed.bucket" in key]


def test_two_subscriptions_share_one_index_and_recover_after_kill(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    subs = {name: client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared) for name in ("a", "b")}
    producer = client.create_producer(topic, batching_enabled=False)
    deliver_at = int(time.time() * 1000) + 6000
    for i in range(100):
        producer.send(f"d{i}".encode(), deliver_at=deliver_at + i)
    producer.send(b"now")
    for consumer in subs.values():
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"now"
        consumer.acknowledge(msg)

    def shared_record() -> dict[str, dict[str, object]] | None:
        cursors = cursor_properties(broker.data_dir, topic)
        index = cursors.get(INDEX_RECORD, {})
        return cursors if bucket_keys(index) and {"a", "b"} <= set(cursors) else None

    cursors = wait_until(shared_record, what="the shared index record")
    assert not bucket_keys(cursors["a"]) and not bucket_keys(cursors["b"]), "no per-subscription buckets"
    stored = snapshot_files(broker.data_dir)
    assert stored
    client.close()

    broker.restart()  # kill -9, then start again
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    subs = {name: client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared) for name in ("a", "b")}
    for name, consumer in subs.items():
        seen: list[bytes] = []
        while len(seen) < 100:
            msg = consumer.receive(timeout_millis=15000)
            consumer.acknowledge(msg)
            if msg.data() == b"now":
                continue  # its ack may not have been stored before the kill: a redelivery
            assert time.time() * 1000 >= deliver_at - 200, f"{name}: {msg.data()!r} delivered before its time"
            seen.append(msg.data())
        assert sorted(seen) == sorted(f"d{i}".encode() for i in range(100)), name
    for consumer in subs.values():
        with pytest.raises(pulsar.Timeout):
            # "now" may come again at any point, the last one included: its ack may not
            # have been stored before the kill; nothing else may
            while (msg := consumer.receive(timeout_millis=500)).data() == b"now":
                consumer.acknowledge(msg)
    subs["a"].unsubscribe()
    subs["b"].unsubscribe()
    wait_until(lambda: not snapshot_files(broker.data_dir), what="every snapshot deleted")
    assert INDEX_RECORD not in cursor_properties(broker.data_dir, topic)
    client.close()


def test_snapshots_stay_until_the_last_subscription_goes(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    subs = {name: client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared) for name in ("a", "b")}
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(60):
        producer.send(b"x", deliver_after=pulsar.timedelta(seconds=600))
    producer.send(b"marker")
    for consumer in subs.values():
        assert consumer.receive(timeout_millis=5000).data() == b"marker"
    stored = snapshot_files(broker.data_dir)
    assert stored
    subs["a"].unsubscribe()
    assert snapshot_files(broker.data_dir) == stored
    subs["b"].unsubscribe()
    assert snapshot_files(broker.data_dir) == []
    client.close()
