"""The load manager of three ``magnetar broker`` processes over one ZooKeeper: one leader,
load reports in the registrations, a skewed start that evens out by shedding, splits by
hand (through any broker) and by topic count."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from cluster_helpers import CLUSTER, Cluster, start_cluster
from e2e_helpers import quiet_logger, wait_until

from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.zookeeper_process import ZooKeeperProcess

TOPICS = 12
RATE_PER_TOPIC = 40
SIZE = 1024
#: 100 % of a broker's bandwidth in is a third of the whole traffic: an even spread loads each broker 100 %
NIC_GBPS = TOPICS * RATE_PER_TOPIC * SIZE / 3 * 8 / 1e9
SETTINGS = {
    "loadBalancerReportUpdateMinIntervalMillis": "500",
    "loadBalancerSheddingIntervalMinutes": "0.02",
    "loadBalancerSplitIntervalMinutes": "0.02",
    "loadBalancerHistoryResourcePercentage": "0",
    "loadBalancerBundleUnloadMinThroughputThreshold": "0",
    "loadBalancerCPUResourceWeight": "0",
    "loadBalancerBandwithOutResourceWeight": "0",
    "loadBalancerOverrideBrokerNicSpeedGbps": f"{NIC_GBPS:.9f}",
    "loadBalancerNamespaceBundleMaxTopics": "4",
    "loadBalancerSheddingGracePeriodMinutes": "0.1",
    "loadBalancerResourceQuotaUpdateIntervalMinutes": "0.02",
}


class ThreeBrokers:
    """A cluster whose first broker starts alone; ``complete()`` starts the other two."""

    def __init__(self, zookeeper: ZooKeeperProcess, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.settings = {**SETTINGS, **(settings or {})}
        self.cluster: Cluster = start_cluster(zookeeper, data_dir, 1, self.settings)
        self.store = ZooKeeperMetadataStore(self.cluster.url)

    @property
    def first(self) -> BrokerProcess:
        return self.cluster.brokers[0]

    def complete(self) -> None:
        if len(self.cluster.brokers) >= 3:
            return
        settings = {"metadataStoreUrl": self.cluster.url, "clusterName": CLUSTER,
                    "metadataStoreSessionTimeoutMillis": "4000", **self.settings}
        more = [BrokerProcess(self.data_dir, settings, subcommand="broker") for _ in range(2)]
        self.cluster.brokers += more
        starting = [threading.Thread(target=b.start) for b in more]  # together, as a rolled-out cluster would
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        for broker in more:
            broker.wait_ready(1)

    def registrations(self) -> dict[str, dict[str, object]]:
        return {b: self.store.get_broker(b) or {} for b in self.store.list_brokers()}

    def bundles(self, namespace: str) -> NamespaceBundles:
        return bundles_of(namespace, self.store.get_namespace_policies(namespace))

    def log(self) -> str:
        return "\n".join(b.log_path.read_text(errors="replace") for b in self.cluster.brokers)


@pytest.fixture(scope="module")
def brokers(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreeBrokers]:
    running = ThreeBrokers(zookeeper, tmp_path_factory.mktemp("lb") / "data")
    yield running
    running.store.close()
    running.cluster.stop()


def make_namespace(broker: BrokerProcess, bundles: int) -> str:
    tenant = f"lb-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=broker.web_url, timeout=30, follow_redirects=True) as admin:
        assert admin.put(f"/admin/v2/tenants/{tenant}", json={"allowedClusters": [CLUSTER]}).status_code == 204
        r = admin.put(f"/admin/v2/namespaces/{tenant}/ns", json={"bundles": {"numBundles": bundles}})
        assert r.status_code == 204, r.text
    return f"{tenant}/ns"


def one_topic_per_bundle(namespace: str, bundles: NamespaceBundles) -> list[str]:
    found: dict[str, str] = {}
    i = 0
    while len(found) < len(bundles):
        topic = f"persistent://{namespace}/t{i}"
        found.setdefault(bundles.find_bundle(topic).range_name, topic)
        i += 1
    return list(found.values())


class SteadyLoad:
    """``RATE_PER_TOPIC`` messages a second of ``SIZE`` bytes on each topic, from a thread."""

    def __init__(self, client: pulsar.Client, topics: list[str]) -> None:
        self.producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=60_000)
                          for t in topics]
        self.acked = self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _done(self, result: pulsar.Result, _msg_id: object) -> None:
        with self._lock:
            if result == pulsar.Result.Ok:
                self.acked += 1
            else:
                self.failed += 1

    def _run(self) -> None:
        payload = b"x" * SIZE
        start = time.monotonic()
        sent = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * RATE_PER_TOPIC)
            while sent < due:
                for producer in self.producers:
                    producer.send_async(payload, self._done)
                sent += 1
            self._stop.wait(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def rates(brokers: ThreeBrokers) -> dict[str, float]:
    return {b: float(data.get("msgRateIn", 0)) for b, data in brokers.registrations().items()}  # type: ignore[arg-type]


def within_20_percent(observed: dict[str, float]) -> bool:
    if len(observed) < 3:
        return False
    mean = sum(observed.values()) / len(observed)
    expected_total = TOPICS * RATE_PER_TOPIC
    return sum(observed.values()) >= 0.8 * expected_total and all(abs(r - mean) <= 0.2 * mean
                                                                   for r in observed.values())


def steadily_even(brokers: ThreeBrokers, timeout_s: float, steady_s: float) -> float:
    """When the brokers' rates came within 20 % of their mean and stayed so for ``steady_s``
    (a move's first seconds show the new owner the producers' queued messages at once)."""
    deadline = time.monotonic() + timeout_s
    since: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if not within_20_percent(rates(brokers)):
            since = None
        elif since is None:
            since = now
        elif now - since >= steady_s:
            return since
        time.sleep(0.25)  # a reading every quarter second: the reports come every half second
    raise AssertionError(f"rates not steadily within 20 % of the mean within {timeout_s} s: {rates(brokers)}")


def test_a_skewed_start_evens_out(brokers: ThreeBrokers) -> None:
    skewed_start_evens_out(brokers)
    log = brokers.log()
    assert "load shedding: unload" in log and "is above the average" in log
    assert "ignoring config keys" not in log  # the load balancer's keys are known


@pytest.mark.slow
def test_a_skewed_start_evens_out_with_the_transfer_shedder(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    brokers = ThreeBrokers(zookeeper, tmp_path / "data", {
        "loadBalancerLoadSheddingStrategy": "org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder",
        "loadBalancerBrokerLoadTargetStd": "0.1"})
    try:
        skewed_start_evens_out(brokers)
        log = brokers.log()
        assert "load shedding: unload" in log and "loadBalancerBrokerLoadTargetStd" in log
        # each bundle went where the decision said: handed straight to the destination
        decided = set(re.findall(r"load shedding: unload (\S+) from \S+ to (\S+):", log))
        handed = set(re.findall(r"unloaded bundle (\S+), handed over to (\S+)", log))
        assert decided and decided <= handed, (decided, handed)
    finally:
        brokers.store.close()
        brokers.cluster.stop()


def skewed_start_evens_out(brokers: ThreeBrokers) -> None:
    first = brokers.first
    namespace = make_namespace(first, TOPICS)
    topics = one_topic_per_bundle(namespace, brokers.bundles(namespace))
    bundle = brokers.bundles(namespace).bundles[0].range_name
    client = pulsar.Client(first.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    load = SteadyLoad(client, topics)
    try:
        leader = f"127.0.0.1:{first.web_port}"
        wait_until(lambda: rates(brokers).get(leader, 0) >= 0.8 * TOPICS * RATE_PER_TOPIC, 15,
                   "every topic published to on the first broker")
        started = time.monotonic()
        brokers.complete()
        even_since = steadily_even(brokers, timeout_s=60, steady_s=2)
        print(f"\nevened out {even_since - started:.1f} s after the other brokers started (and stayed so 2 s): "
              f"{rates(brokers)}")
        with httpx.Client(base_url=brokers.cluster.brokers[2].web_url, timeout=10) as admin:
            assert admin.get("/admin/v2/brokers/leaderBroker").json()["brokerId"] == leader
            report = admin.get("/admin/v2/broker-stats/load-report").json()
        assert report["numBundles"] >= 1 and report["lastStats"] and report["bandwidthIn"]["limit"] > 0
        with httpx.Client(base_url=first.web_url, timeout=30) as admin:
            metrics = {line.split("{")[0]: line for line in admin.get("/metrics").text.splitlines()
                       if line.startswith("pulsar_lb_")}
        assert float(metrics["pulsar_lb_unload_bundle_total"].split()[-1]) >= 1, metrics
        assert float(metrics["pulsar_lb_unload_broker_total"].split()[-1]) >= 1
        assert 'metric="loadBalancing"' in metrics["pulsar_lb_bandwidth_in_usage"]
        assert {"pulsar_lb_cpu_usage", "pulsar_lb_bandwidth_out_usage", "pulsar_lb_bundles_split_total"} <= set(metrics)
        # the leader's bundle histories, where Pulsar's are
        history = wait_until(lambda: brokers.store.get_bundle_data(f"{namespace}/{bundle}"), 10, "bundle data")
        assert history["topics"] == 1 and history["shortTermData"]["msgRateIn"] > 0
        assert load.failed == 0
    finally:
        load.stop()
        client.close()


def test_split_by_hand_through_any_broker(brokers: ThreeBrokers) -> None:
    brokers.complete()
    first = brokers.first
    namespace = make_namespace(first, 2)
    topics = one_topic_per_bundle(namespace, brokers.bundles(namespace))
    client = pulsar.Client(first.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producers = [client.create_producer(t) for t in topics]
        for producer in producers:
            producer.send(b"before")
        bundle = brokers.bundles(namespace).bundles[0]
        for broker in brokers.cluster.brokers:  # the owner splits; the others answer 307 to it
            with httpx.Client(base_url=broker.web_url, timeout=30) as admin:
                r = admin.put(f"/admin/v2/namespaces/{namespace}/{bundle.range_name}/split",
                              params={"unload": "false"}, follow_redirects=True)
                if r.status_code == 204:
                    break
                assert r.status_code == 412 and "is not a bundle of" in r.json()["reason"], r.text
        assert len(brokers.bundles(namespace)) == 3
        for producer in producers:
            producer.send(b"after")  # served on through the split
        with httpx.Client(base_url=brokers.cluster.brokers[-1].web_url, timeout=30) as admin:
            assert admin.get(f"/admin/v2/namespaces/{namespace}/bundles").json()["numBundles"] == 3
            bad = admin.put(f"/admin/v2/namespaces/{namespace}/{bundle.range_name}/split", follow_redirects=True)
            assert bad.status_code == 412
    finally:
        client.close()


def test_auto_split_by_topic_count(brokers: ThreeBrokers) -> None:
    brokers.complete()
    first = brokers.first
    namespace = make_namespace(first, 1)
    client = pulsar.Client(first.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producers = [client.create_producer(f"persistent://{namespace}/t{i}") for i in range(10)]
        for producer in producers:
            producer.send(b"x")
        split = wait_until(lambda: b if len(b := brokers.bundles(namespace)) >= 2 else None, 30,
                           "the bundle split")
        log = brokers.log()
        assert "topics > loadBalancerNamespaceBundleMaxTopics 4" in log
        for producer in producers:
            producer.send(b"y")  # served after the split and the unload of its halves
        print(f"\n{namespace}: {len(split)} bundles after the split")
    finally:
        client.close()


def leader_seen_by(broker: BrokerProcess) -> str | None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        r = admin.get("/admin/v2/brokers/leaderBroker")
    return str(r.json()["brokerId"]) if r.status_code == 200 else None


def test_when_the_leader_dies_another_leads_and_places_bundles(brokers: ThreeBrokers) -> None:
    """Last in the module: it kills a broker."""
    brokers.complete()
    leader_id = leader_seen_by(brokers.cluster.brokers[1])
    assert leader_id is not None
    leader = brokers.cluster.by_id(leader_id)
    survivors = [b for b in brokers.cluster.brokers if b is not leader]
    leader.kill()  # its session expires after metadataStoreSessionTimeoutMillis (4 s)
    new_leader = wait_until(lambda: (seen := leader_seen_by(survivors[0])) not in (None, leader_id) and seen, 30,
                            "a new leader")
    assert new_leader in {brokers.cluster.broker_id(b) for b in survivors}
    wait_until(lambda: leader_seen_by(survivors[1]) == new_leader, 10, "both survivors agreeing on the leader")
    namespace = make_namespace(survivors[0], 4)
    client = pulsar.Client(survivors[1].service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:  # free bundles are placed again, by the new leader
        for topic in one_topic_per_bundle(namespace, brokers.bundles(namespace)):
            client.create_producer(topic).send(b"placed")
    finally:
        client.close()
    assert f"{new_leader} is the load manager's leader" in brokers.log()
