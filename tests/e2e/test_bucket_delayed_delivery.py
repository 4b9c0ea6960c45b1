"""The bucket-based delayed delivery tracker (PIP-195) end to end: sealing, kill -9, recovery, cleanup."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from e2e_helpers import drain, quiet_logger, wait_until

from magnetar.core.delayed.bucket import is_bucket_key
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


def persisted_bucket_keys(data_dir: Path, topic: str, subscription: str) -> list[str]:
    """Bucket keys in the cursor properties as stored on disk (what a restart will read)."""
    with contextlib.closing(sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT properties FROM cursors WHERE topic = ? AND name = ?",
                         (topic, subscription)).fetchone()
    return [key for key in json.loads(row[0]) if is_bucket_key(key)] if row else []


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
    wait_until(lambda: persisted_bucket_keys(broker.data_dir, topic, "s"), what="bucket list persisted")
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    seen: list[bytes] = []
    while len(seen) < 100:
        msg = consumer.receive(timeout_millis=15000)
        consumer.acknowledge(msg)
        if msg.data().startswith(b"now"):
            continue  # acknowledged before the kill, maybe not yet persisted: redelivery is allowed
        assert time.time() * 1000 >= deliver_at - 200, f"{msg.data()!r} delivered before its time"
        seen.append(msg.data())
    assert sorted(seen) == sorted(f"d{i}".encode() for i in range(100))
    # what may still come is a redelivered "now" (stored after the delayed ones), never a second d
    late = [m.data() for m in drain(consumer, quiet_ms=500)]
    assert all(data.startswith(b"now") for data in late), f"delivered twice: {late}"
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


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]
_LINE = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(broker: BrokerProcess) -> Series:
    """Every sample of /metrics by (name, labels)."""
    series: Series = {}
    for line in httpx.get(f"{broker.web_url}/metrics", timeout=10).text.splitlines():
        match = _LINE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        series[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return series


def sample(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def test_metrics_export_the_bucket_index_per_subscription_and_topic(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    subs = [client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared) for name in ("m1", "m2")]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(b"x", deliver_after=pulsar.timedelta(seconds=600 + i))
    producer.send(b"marker")
    for consumer in subs:
        assert consumer.receive(timeout_millis=5000).data() == b"marker"
    base = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    create_ok = "pulsar_delayed_message_index_bucket_op_count"

    def created_for_both() -> Series | None:
        series = scrape(broker)
        done = all((sample(series, create_ok, **base, subscription=s, state="succeed", type="create") or 0) >= 1
                   for s in ("m1", "m2"))
        return series if done else None

    series = wait_until(created_for_both, what="bucket snapshots created for both subscriptions")
    for name in ("pulsar_delayed_message_index_bucket_total", "pulsar_delayed_message_index_loaded",
                 "pulsar_delayed_message_index_bucket_snapshot_size_bytes"):
        per_sub = [sample(series, name, **base, subscription=s) for s in ("m1", "m2")]
        assert all(v is not None and v > 0 for v in per_sub), (name, per_sub)
        assert sample(series, name, **base) == sum(v for v in per_sub if v is not None), name
    assert (sample(series, "pulsar_delayed_message_index_bucket_total", **base, subscription="m1") or 0) >= 2
    for state in ("all", "succeed"):
        per_sub = [sample(series, create_ok, **base, subscription=s, state=state, type="create") or 0
                   for s in ("m1", "m2")]
        assert sample(series, create_ok, **base, state=state, type="create") == sum(per_sub)
    latency = "pulsar_delayed_message_index_bucket_op_latency_ms"
    quantiles = {"50", "100", "500", "1000", "5000", "30000", "60000", "overflow"}
    ranges = {(dict(labels)["quantile"], value) for (name, labels), value in series.items()
              if name == latency and ("subscription", "m1") in labels and ("type", "create") in labels}
    assert ranges and {q for q, _ in ranges} <= quantiles
    created = sample(series, create_ok, **base, subscription="m1", state="succeed", type="create")
    assert sum(v for _, v in ranges) == created
    assert sample(series, latency + "_count", **base, subscription="m1", type="create") == created
    assert sample(series, latency + "_sum", **base, subscription="m1", type="create") is not None
    client.close()
