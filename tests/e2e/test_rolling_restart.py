"""Planned moves that applications must not notice: brokers of a three-broker cluster SIGTERMed
in turn (each hands its bundles over, then starts again on its own ports) while producers with
deduplication and Shared and Key_Shared consumers run. Nothing an application sees may change:
no error, nothing acknowledged lost, nothing stored twice, nothing processed twice, Key_Shared
order per key kept."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from cluster_helpers import Cluster, start_cluster
from e2e_helpers import wait_until
from rolling_traffic import Publisher, Score, Subscriber, client_for, first_deliveries_out_of_order, stored_duplicates

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.zookeeper_process import ZooKeeperProcess

#: full rolling restarts the slow campaign makes (each restarts every broker once)
ROUNDS = int(os.environ.get("MAGNETAR_ROLLING_ROUNDS", "5"))
RATE = 200  # msgs/s per producer
SUBSCRIPTIONS = {"shared": pulsar.ConsumerType.Shared, "key_shared": pulsar.ConsumerType.KeyShared}


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    # everything kept, so that what was stored can be read back at the end
    config = {"brokerDeduplicationEnabled": "true", "defaultRetentionTimeInMinutes": "-1",
              "defaultRetentionSizeInMB": "-1"}
    running = start_cluster(zookeeper, tmp_path / "data", count=3, config=config)
    yield running
    running.stop()


def restart_each(brokers: list[BrokerProcess], between_s: float) -> list[float]:
    """SIGTERM each broker in turn and start it again on its own ports; the seconds each
    took to stop."""
    stops = []
    for broker in brokers:
        started = time.monotonic()
        assert broker.stop() == 0, broker.log_tail()
        stops.append(time.monotonic() - started)
        broker.start()
        time.sleep(between_s)  # traffic runs on the cluster as it is now, by design
    return stops


def run_through_restarts(cluster: Cluster, restarts: Callable[[dict[str, str]], list[BrokerProcess]]) -> None:
    client = client_for([b.service_url for b in cluster.brokers])
    tag = uuid.uuid4().hex[:8]
    topics = {kind: f"persistent://public/default/rr-{kind}-{tag}" for kind in SUBSCRIPTIONS}
    scores = {kind: Score() for kind in topics}
    subscribers = [Subscriber(client, topics[kind], kind, consumer_type, scores[kind])
                   for kind, consumer_type in SUBSCRIPTIONS.items() for _ in range(2)]
    publishers = [Publisher(client, topics[kind], scores[kind], RATE, keys=16) for kind in topics]
    try:
        for worker in (*subscribers, *publishers):
            worker.start()
        wait_until(lambda: all(len(s.acknowledged) > RATE for s in scores.values()), 20, "traffic flowing")
        stops = restart_each(restarts(topics), between_s=1.0)
        for publisher in publishers:
            publisher.finish()
        wait_until(lambda: all(score.received_all() for score in scores.values()), 30,
                   "every acknowledged message received")
    finally:
        for worker in subscribers:
            worker.finish()
    try:
        for kind, score in scores.items():
            duplicates, stored = stored_duplicates(client, topics[kind])
            print(f"{kind}: sent {score.sent}, acknowledged {len(score.acknowledged)}, received "
                  f"{len(score.received)}, longest receipt {score.longest_receipt_s * 1000:.0f} ms, "
                  f"brokers stopped within {max(stops):.2f} s")
            assert score.errors == [], score.errors[:5]
            assert score.acknowledged == set(range(score.sent)), "every message sent was acknowledged"
            assert score.acknowledged <= stored, f"lost: {sorted(score.acknowledged - stored)[:10]}"
            assert duplicates == [], f"stored twice: {duplicates[:10]}"
            assert score.redelivered() == 0, "consumers acknowledged everything they held before each move"
        assert first_deliveries_out_of_order(scores["key_shared"].received) == []
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_the_owner_restarted_under_traffic_costs_the_application_nothing(cluster: Cluster) -> None:
    def owners(topics: dict[str, str]) -> list[BrokerProcess]:
        found = {cluster.owner_of(topic) for topic in topics.values()}
        return [cluster.by_id(owner) for owner in found if owner is not None]
    run_through_restarts(cluster, owners)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_rolling_restarts_cost_the_application_nothing(cluster: Cluster) -> None:
    run_through_restarts(cluster, lambda _: cluster.brokers * ROUNDS)
