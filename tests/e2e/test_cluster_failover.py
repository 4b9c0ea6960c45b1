"""A broker of a cluster going away: SIGTERM hands its bundles over, SIGKILL loses them
once its session expires; either way the client carries on through the other broker and
every acknowledged message stays readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from cluster_helpers import Cluster, start_cluster, topic_owned_by
from e2e_helpers import quiet_logger, read_topic, wait_until

from magnetar.testing.zookeeper_process import ZooKeeperProcess


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path / "data")
    yield running
    running.stop()


def test_sigterm_hands_the_bundles_to_the_other_broker(cluster: Cluster) -> None:
    a, b = cluster.brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=20, logger=quiet_logger())
    try:
        topic = topic_owned_by(cluster, b, client)
        producer = client.create_producer(topic, send_timeout_millis=30_000)
        for i in range(20):
            producer.send(f"m{i}".encode())
        stopped_at = time.monotonic()
        assert b.stop() == 0
        assert "released 1 bundles" in b.log_tail(20)
        # released before it exited, not at its session's expiry
        assert cluster.owner_of(topic) != cluster.broker_id(b)
        for i in range(20, 40):
            producer.send(f"m{i}".encode())
        assert time.monotonic() - stopped_at < 4.0  # within the session timeout: handed over
        assert cluster.owner_of(topic) == cluster.broker_id(a)
        assert read_topic(client, topic) == [f"m{i}".encode() for i in range(40)]
    finally:
        client.close()


@pytest.mark.timeout(90)
def test_sigkill_of_the_owner_under_load_loses_no_acknowledged_message(cluster: Cluster) -> None:
    a, b = cluster.brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        topic = topic_owned_by(cluster, b, client)
        producer = client.create_producer(topic, send_timeout_millis=30_000, batching_enabled=False)
        acknowledged: list[bytes] = []
        killed_at = resumed_after = None
        deadline = time.monotonic() + 60
        i = 0
        while len(acknowledged) < 200 and time.monotonic() < deadline:
            payload = f"m{i}".encode()
            i += 1
            try:
                producer.send(payload)
            except pulsar.PulsarException:
                continue  # not acknowledged: it may or may not be stored
            acknowledged.append(payload)
            if len(acknowledged) == 100:
                b.kill()
                killed_at = time.monotonic()
            elif killed_at is not None and resumed_after is None:
                resumed_after = time.monotonic() - killed_at
        assert killed_at is not None and resumed_after is not None, f"{len(acknowledged)} acknowledged"
        print(f"publishes succeeded again {resumed_after:.1f} s after SIGKILL of the owner")
        assert cluster.owner_of(topic) == cluster.broker_id(a)
        stored = wait_until(lambda: read_topic(client, topic), 10, "the topic read back")
        missing = [m for m in acknowledged if m not in set(stored)]
        assert missing == [], f"{len(missing)} acknowledged messages lost"
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_paused_owner_past_its_session_stops_serving_and_loses_nothing(cluster: Cluster) -> None:
    """SIGSTOP of the owner for longer than its session, then SIGCONT: it learns it lost its
    bundles, acknowledges nothing more, and the client carries on through the other broker."""
    a, b = cluster.brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    results: dict[bytes, bool] = {}
    lock = threading.Lock()

    def sent(payload: bytes) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _: pulsar.MessageId) -> None:
            with lock:
                results[payload] = result == pulsar.Result.Ok
        return done
    try:
        topic = topic_owned_by(cluster, b, client)
        producer = client.create_producer(topic, send_timeout_millis=60_000, batching_enabled=False)
        payloads = [f"m{i}".encode() for i in range(120)]
        for payload in payloads[:50]:
            producer.send(payload)
            results[payload] = True
        os.kill(b.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            for payload in payloads[50:80]:  # queued while the owner is paused
                producer.send_async(payload, sent(payload))
            wait_until(lambda: cluster.owner_of(topic) is None, 30, "the paused owner's session expired")
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        for payload in payloads[80:]:
            producer.send(payload)
            results[payload] = True
        wait_until(lambda: len(results) == len(payloads), 60, "every send answered")
        assert cluster.owner_of(topic) == cluster.broker_id(a)
        wait_until(lambda: "metadata store session lost" in b.log_tail(200), 10, "the owner saw its session lost")
        stored = set(read_topic(client, topic))
        acknowledged = [payload for payload, ok in results.items() if ok]
        assert [m for m in acknowledged if m not in stored] == []
        # it rejoined: registered again under a new session, serving nothing it lost
        wait_until(lambda: cluster.broker_id(b) in registered(cluster), 20, "the paused broker registered again")
    finally:
        client.close()


def registered(cluster: Cluster) -> list[str]:
    from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
    with ZooKeeperMetadataStore(cluster.url) as store:
        return store.list_brokers()


def test_the_shutdown_call_hands_the_bundles_over_and_stops_the_broker(cluster: Cluster) -> None:
    """Pulsar's ``POST /admin/v2/brokers/shutdown``, through ``magnetar admin brokers
    shutdown``: the step of a rolling restart without a signal. Bad input changes nothing."""
    import httpx
    a, b = cluster.brokers
    client = pulsar.Client(a.service_url, operation_timeout_seconds=20, logger=quiet_logger())
    try:
        topic = topic_owned_by(cluster, b, client)
        for bad in ("maxConcurrentUnloadPerSec=-1", "maxConcurrentUnloadPerSec=lots", "forcedTerminateTopic=maybe"):
            answer = httpx.post(f"{b.web_url}/admin/v2/brokers/shutdown?{bad}", timeout=10)
            assert answer.status_code in (400, 412, 422), (bad, answer.status_code, answer.text)
        assert b.proc is not None and b.proc.poll() is None, "bad input stopped nothing"
        done = subprocess.run([sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", b.web_url,
                               "brokers", "shutdown"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert b.proc.wait(30) == 0
        assert "released 1 bundles" in b.log_tail(30)
        producer = client.create_producer(topic)
        producer.send(b"after")
        assert cluster.owner_of(topic) == cluster.broker_id(a)
    finally:
        client.close()
