"""Two or more ``magnetar broker`` processes over one ZooKeeper chroot and one data directory."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pulsar

from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.core.names import TopicName
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.zookeeper_ensemble import ZooKeeperEnsemble
from magnetar.testing.zookeeper_process import ZooKeeperProcess

CLI = [sys.executable, "-m", "magnetar.cli"]
CLUSTER = "test-cluster"


def initialize(metadata_store: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "initialize-cluster-metadata", "--cluster", CLUSTER,
                           "--metadata-store", metadata_store, *extra],
                          capture_output=True, text=True, timeout=60)


@dataclass
class Cluster:
    url: str
    brokers: list[BrokerProcess]

    def broker_id(self, broker: BrokerProcess) -> str:
        return f"127.0.0.1:{broker.web_port}"

    def owner_of(self, topic: str) -> str | None:
        """The id of the broker whose ownership node holds the topic's bundle, read from ZooKeeper."""
        name = TopicName.parse(topic)
        bundle = NamespaceBundles(name.namespace_name).find_bundle(str(name))
        with ZooKeeperMetadataStore(self.url) as store:
            node = store.get_bundle_owner(bundle.namespace, bundle.range_name)
        return None if node is None else str(node.data["brokerId"])

    def by_id(self, broker_id: str) -> BrokerProcess:
        return next(b for b in self.brokers if self.broker_id(b) == broker_id)

    def stop(self) -> None:
        for broker in self.brokers:
            broker.kill()


def start_cluster(zookeeper: ZooKeeperProcess | ZooKeeperEnsemble, data_dir: Path, count: int = 2,
                  config: dict[str, str] | None = None) -> Cluster:
    """A fresh chroot initialised, and ``count`` brokers sharing ``data_dir``."""
    url = zookeeper.url(f"/cluster-{uuid.uuid4().hex[:8]}")
    done = initialize(url)
    assert done.returncode == 0, done.stderr
    settings = {"metadataStoreUrl": url, "clusterName": CLUSTER, "metadataStoreSessionTimeoutMillis": "4000",
                **(config or {})}
    brokers: list[BrokerProcess] = []
    try:
        for _ in range(count):
            brokers.append(BrokerProcess(data_dir, settings, subcommand="broker").start())
    except BaseException:
        for broker in brokers:
            broker.kill()
        raise
    return Cluster(url, brokers)


def topic_owned_by(cluster: Cluster, owner: BrokerProcess, client: pulsar.Client) -> str:
    """A fresh topic whose bundle ``owner`` takes, found by asking through ``client``."""
    prefix = uuid.uuid4().hex[:8]
    for i in range(64):
        topic = f"persistent://public/default/f-{prefix}-{i}"
        client.create_producer(topic).close()
        if cluster.owner_of(topic) == cluster.broker_id(owner):
            return topic
    raise AssertionError(f"{cluster.broker_id(owner)} took none of 64 topics")


def one_topic_per_bundle() -> list[str]:
    """Fresh topics of public/default, one in each of its four bundles."""
    bundles = NamespaceBundles("public/default")
    found: dict[str, str] = {}
    prefix = uuid.uuid4().hex[:8]
    i = 0
    while len(found) < len(bundles):
        topic = f"persistent://public/default/c-{prefix}-{i}"
        found.setdefault(bundles.find_bundle(topic).range_name, topic)
        i += 1
    return list(found.values())


class Publisher:
    """Sends one message every 20 ms; notes when each receipt came."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.receipts: list[tuple[float, bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        index = 0
        while not self.stop.is_set():
            payload = f"m{index}".encode()

            def done(result: pulsar.Result, _: pulsar.MessageId, payload: bytes = payload) -> None:
                with self.lock:
                    if result == pulsar.Result.Ok:
                        self.receipts.append((time.monotonic(), payload))
                    else:
                        self.errors.append(str(result))
            self.producer.send_async(payload, done)
            index += 1
            self.stop.wait(0.02)

    def last_receipt(self) -> float:
        with self.lock:
            return self.receipts[-1][0] if self.receipts else 0.0
