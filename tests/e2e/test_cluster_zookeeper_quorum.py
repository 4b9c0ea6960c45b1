"""One ZooKeeper server of three killed under a running cluster: the ensemble elects again
and the brokers' sessions move to a server still running, so nothing fails over, no
application sees an error, and every acknowledged message is read back.

The server killed is the ensemble's leader, the harder case: every write waits for the
election, not only the sessions that were connected to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from cluster_helpers import Cluster, Publisher, start_cluster
from e2e_helpers import quiet_logger, read_topic, wait_until

from magnetar.testing.zookeeper_ensemble import ZooKeeperEnsemble
from magnetar.testing.zookeeper_process import zookeeper_unavailable

SESSION_MS = 4000


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    reason = zookeeper_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with ZooKeeperEnsemble(tmp_path / "zk").start() as servers:
        yield servers


@pytest.mark.timeout(180)
def test_the_leader_of_three_zookeeper_servers_killed_costs_no_failover_and_no_message(
        ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    cluster: Cluster = start_cluster(ensemble, tmp_path / "data", count=2,
                                     config={"metadataStoreSessionTimeoutMillis": str(SESSION_MS)})
    hosts = ",".join(b.service_url.removeprefix("pulsar://") for b in cluster.brokers)
    client = pulsar.Client(f"pulsar://{hosts}", operation_timeout_seconds=60, logger=quiet_logger())
    try:
        topic = f"persistent://public/default/quorum-{time.monotonic_ns()}"
        publisher = Publisher(client.create_producer(topic, send_timeout_millis=0, batching_enabled=False))
        publisher.thread.start()
        wait_until(lambda: len(publisher.receipts) >= 20, timeout_s=20, what="receipts before the kill")
        owner = cluster.owner_of(topic)
        assert owner is not None
        ensemble.leader().stop()
        killed = time.monotonic()
        # a new topic needs the store's writes (its record, its bundle's ownership): they wait
        # for the election and then succeed (asked over REST: the official client's blocking
        # calls hold the interpreter lock, which would hold back the publisher's callbacks)
        fresh = f"{topic}-after"
        web = cluster.brokers[0].web_url
        path = fresh.replace("persistent://", "persistent/")
        created = httpx.put(f"{web}/admin/v2/{path}", timeout=60, follow_redirects=True)
        assert created.status_code == 204, created.text
        found = httpx.get(f"{web}/lookup/v2/topic/{path}", timeout=60, follow_redirects=True)
        assert found.status_code == 200 and found.json()["brokerUrl"].startswith("pulsar://"), found.text
        created_in = time.monotonic() - killed
        wait_until(lambda: publisher.last_receipt() > killed + 3.0, timeout_s=60,
                   what="receipts going on after the ZooKeeper leader was killed")
        assert sum(server.proc is not None and server.mode() == "leader" for server in ensemble.servers) == 1
        publisher.stop.set()
        publisher.thread.join(10)
        publisher.producer.flush()
        assert publisher.errors == []
        times = [at for at, _ in publisher.receipts]
        longest_gap = max(b - a for a, b in zip(times, times[1:], strict=False))
        assert longest_gap < SESSION_MS / 1000, f"receipts stopped for {longest_gap:.1f} s"
        assert cluster.owner_of(topic) == owner, "the topic failed over though its broker kept running"
        assert all(broker.proc is not None and broker.proc.poll() is None for broker in cluster.brokers)
        acknowledged = [payload for _, payload in publisher.receipts]
        stored = read_topic(client, topic)
        assert set(acknowledged) <= set(stored), "an acknowledged message was lost"
        assert len(stored) == len(set(stored)), "a message was stored twice"
        print(f"\nlongest wait between receipts {longest_gap * 1000:.0f} ms; {len(acknowledged)} acknowledged; "
              f"a new topic created and looked up {created_in * 1000:.0f} ms after the kill")
    finally:
        client.close()
        cluster.stop()
