"""PRODUCER commands for topics of one bundle that reach a broker together, before it owns
the bundle, are all served, whichever of them takes the bundle.

Such a command waits for the bundle (a client sent by the broker handing it over, as after
a namespace unload) and takes it. When several came together, one took the bundle; the
others, finding the ownership node this broker's rather than the handed-over one, gave up:
refused with ServiceNotReady if the bundle was not yet in this broker's owned map, and,
once it was, not answered at all (the refusal raised nothing), so their client waited out
its operation timeout (30 s; found by ``bench/failover_campaign.py --parts spread``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import Cluster, start_cluster

from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.core.cluster.namespace_ephemeral_data import NamespaceEphemeralData
from magnetar.server.cluster_membership import owner_record
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.raw_client import RawConnection, T, producer
from magnetar.testing.zookeeper_process import ZooKeeperProcess

COMMANDS = 8


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path / "data", count=1)
    yield running
    running.stop()


def topics_of_one_bundle(count: int) -> list[str]:
    bundles = NamespaceBundles("public/default")
    prefix = uuid.uuid4().hex[:8]
    topics = [f"persistent://public/default/h-{prefix}-{i}" for i in range(count * len(bundles) * 4)]
    bundle = bundles.find_bundle(topics[0])
    return [t for t in topics if bundles.find_bundle(t) == bundle][:count]


def test_producers_sent_by_a_broker_handing_its_bundle_over_are_all_answered(cluster: Cluster) -> None:
    topics = topics_of_one_bundle(COMMANDS)
    assert len(topics) == COMMANDS
    broker = cluster.brokers[0]
    bundle = NamespaceBundles("public/default").find_bundle(topics[0])
    # the node of another broker handing the bundle over to this one, as it leaves it while unloading
    leaving = owner_record(NamespaceEphemeralData("127.0.0.1:1", "pulsar://127.0.0.1:1", http_url="http://127.0.0.1:1"))
    with ZooKeeperMetadataStore(cluster.url) as store, \
            RawConnection.to_service(broker.service_url, timeout_s=10) as conn:
        version = store.acquire_bundle(bundle.namespace, bundle.range_name,
                                       {**leaving, "disabled": True, "successor": cluster.broker_id(broker)})
        conn.handshake()
        with conn.corked():  # in one read, as a client's producers reconnecting together
            for i, topic in enumerate(topics, start=1):
                conn.send_command(producer(topic, i, i, producer_name=f"p{i}"))
        # each command now polls the node, waiting for its release (nothing to observe: if
        # some were not waiting yet, the release below only tests less)
        time.sleep(0.3)
        store.release_bundle(bundle.namespace, bundle.range_name, version)
        answered = {}
        for _ in topics:
            frame = conn.read_until(lambda f: f.command.type in (T.PRODUCER_SUCCESS, T.ERROR),
                                    what="an answer to each PRODUCER")
            body = frame.command.producer_success if frame.command.type == T.PRODUCER_SUCCESS else frame.command.error
            answered[body.request_id] = frame.type_name if frame.command.type == T.PRODUCER_SUCCESS else body.message
    assert sorted(answered) == list(range(1, COMMANDS + 1))
    assert set(answered.values()) == {"PRODUCER_SUCCESS"}, answered
    assert cluster.owner_of(topics[0]) == cluster.broker_id(broker)
