"""The load manager's leader killed: the bundles it owned are placed again as soon as its
session is over, not after the survivors' next election round.

Free bundles are placed by the leader, and the other brokers send such lookups to it. A
broker that had seen the leader at its last round kept sending clients to the dead broker
until its next round (up to ``loadBalancerReportUpdateMinIntervalMillis`` later); each
client's failed connection grew its reconnection back-off, and publishes resumed some 12 s
after a SIGKILL with a 5 s session instead of about 6 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cluster_helpers import Cluster, one_topic_per_bundle, start_cluster
from e2e_helpers import wait_until

from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.zookeeper_process import ZooKeeperProcess


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path / "data")
    yield running
    running.stop()


def lookup(web_url: str, topic: str) -> httpx.Response:
    return httpx.get(web_url + topic.replace("persistent://", "/lookup/v2/topic/persistent/"), timeout=30)


def test_a_lookup_after_the_leaders_session_ended_is_not_sent_to_the_dead_leader(cluster: Cluster) -> None:
    with ZooKeeperMetadataStore(cluster.url) as store:
        leader_id = wait_until(lambda: (store.get_leader() or {}).get("brokerId"), 20, "a leader")
        leader = cluster.by_id(leader_id)
        survivor = next(b for b in cluster.brokers if b is not leader)
        # a bundle the leader owns: a lookup through the leader places a fresh bundle on it or the other
        topic = next(t for t in one_topic_per_bundle() if lookup(leader.web_url, t).status_code == 200
                     and cluster.owner_of(t) == leader_id)
        leader.kill()
        wait_until(lambda: leader_id not in store.list_brokers() and store.get_leader() is None, 20,
                   "the dead leader's session over")
        started = time.monotonic()
        answer = lookup(survivor.web_url, topic)
        took = time.monotonic() - started
    assert answer.status_code == 200, f"{answer.status_code}: sent to {answer.headers.get('location')}"
    assert answer.json()["brokerUrl"] == survivor.service_url
    assert cluster.owner_of(topic) == cluster.broker_id(survivor)
    assert took < 5, f"the lookup took {took:.1f} s"
