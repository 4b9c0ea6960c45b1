"""The whole metadata store unreachable past the session timeout: the broker stops
acknowledging (its lease runs out; producers keep their messages and retry) and resumes by
itself once the store is back, with nothing acknowledged lost. Its own ZooKeeper, since the
test stops it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from cluster_helpers import Cluster, Publisher, start_cluster
from e2e_helpers import quiet_logger, read_topic, wait_until

from magnetar.testing.zookeeper_process import ZooKeeperProcess, zookeeper_unavailable

SESSION_MS = 3000


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    reason = zookeeper_unavailable()
    if reason is not None:
        pytest.skip(reason)
    server = ZooKeeperProcess(tmp_path / "zk").start()
    yield server
    server.close()


@pytest.mark.timeout(120)
def test_a_store_outage_past_the_session_stops_receipts_until_it_returns(own_zookeeper: ZooKeeperProcess,
                                                                         tmp_path: Path) -> None:
    cluster: Cluster = start_cluster(own_zookeeper, tmp_path / "data", count=1,
                                     config={"metadataStoreSessionTimeoutMillis": str(SESSION_MS)})
    broker = cluster.brokers[0]
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=quiet_logger())
    try:
        topic = f"persistent://public/default/outage-{time.monotonic_ns()}"
        publisher = Publisher(client.create_producer(topic, send_timeout_millis=0, batching_enabled=False))
        publisher.thread.start()
        wait_until(lambda: len(publisher.receipts) >= 20, timeout_s=20, what="receipts before the outage")
        own_zookeeper.stop()
        stopped = time.monotonic()
        # past the lease (the session and its margin), receipts stop: what is sent waits
        wait_until(lambda: time.monotonic() - publisher.last_receipt() > 2.0
                   and time.monotonic() - stopped > SESSION_MS / 1000 + 1.0,
                   timeout_s=30, what="receipts to stop once the lease ran out")
        quiet_since = publisher.last_receipt()
        assert quiet_since - stopped < SESSION_MS / 1000 + 1.0, "a receipt came after the lease ran out"
        own_zookeeper.start()
        restarted = time.monotonic()
        wait_until(lambda: publisher.last_receipt() > restarted, timeout_s=45,
                   what="receipts again once the store is back")
        publisher.stop.set()
        publisher.thread.join(10)
        publisher.producer.flush()
        assert publisher.errors == []
        acknowledged = [payload for _, payload in publisher.receipts]
        stored = read_topic(client, topic)
        assert set(acknowledged) <= set(stored), "an acknowledged message was lost"
        assert len(stored) == len(set(stored)), "a message was stored twice"
        print(f"\nreceipts stopped {quiet_since - stopped:.1f} s after the store went, came back "
              f"{publisher.last_receipt() - restarted:.1f} s after it returned; {len(acknowledged)} acknowledged")
    finally:
        client.close()
        cluster.stop()
