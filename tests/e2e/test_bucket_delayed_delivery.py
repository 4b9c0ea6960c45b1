"""The bucket-based delayed delivery tracker (PIP-195) end to end: sealing, kill -9, recovery, cleanup."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.broker_process import BrokerProcess

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName":
        "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
    "delayedDeliveryMinIndexCountPerBucket": "10",
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": "5",
    "delayedDeliveryTickTimeMillis": "100",
    "managedLedgerMaxEntriesPerLedger": "20",
    "managedLedgerDefaultMarkDeleteRateLimit": "20",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", CONFIG).start()
    yield proc
    proc.kill()


def snapshot_ledgers(data_dir: Path) -> list[Path]:
    root = data_dir / "buckets"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_recovers_after_kill_and_delivers_each_once(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    deliver_at = int(time.time() * 1000) + 6000
    for i in range(100):
        producer.send(f"d{i}".encode(), deliver_at=deliver_at + i)
    for i in range(5):
        producer.send(f"now{i}".encode())
    now_msgs = set()
    while len(now_msgs) < 5:
        msg = consumer.receive(timeout_millis=5000)
        now_msgs.add(msg.data())
        consumer.acknowledge(msg)
    assert now_msgs == {f"now{i}".encode() for i in range(5)}
    assert snapshot_ledgers(broker.data_dir), "sealed buckets must be stored as snapshots"
    time.sleep(0.3)  # let the cursor with its bucket list be persisted (rate limit 20/s)
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    seen: list[bytes] = []
    while len(seen) < 100:
        msg = consumer.receive(timeout_millis=15000)
        assert time.time() * 1000 >= deliver_at - 200, "delivered before its time"
        seen.append(msg.data())
        consumer.acknowledge(msg)
    assert sorted(seen) == sorted(f"d{i}".encode() for i in range(100))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)
    consumer.unsubscribe()
    client.close()


def test_unsubscribe_deletes_snapshots(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    before = snapshot_ledgers(broker.data_dir)
    for _ in range(60):
        producer.send(b"x", deliver_after=pulsar.timedelta(seconds=600))
    producer.send(b"marker")
    assert consumer.receive(timeout_millis=5000).data() == b"marker"
    assert len(snapshot_ledgers(broker.data_dir)) > len(before)
    consumer.unsubscribe()
    assert snapshot_ledgers(broker.data_dir) == before
    client.close()
