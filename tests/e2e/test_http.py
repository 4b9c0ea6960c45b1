"""The HTTP port: health check and Prometheus metrics, served next to the binary protocol."""

from __future__ import annotations

import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pulsar
from e2e_helpers import receive_n

from magnetar.testing.broker_process import BrokerProcess


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()


def test_health_check_says_ok(broker: BrokerProcess) -> None:
    status, _, body = get(f"{broker.web_url}/admin/v2/brokers/health")
    assert status == 200
    assert body.strip().strip('"') == "ok"


def test_metrics_are_prometheus_text(broker: BrokerProcess, client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    receive_n(consumer, 5)
    status, content_type, body = get(f"{broker.web_url}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    lines = body.splitlines()
    assert any(line.startswith("# TYPE ") for line in lines)
    assert any(line.startswith("# HELP ") for line in lines)
    samples = [line for line in lines if line and not line.startswith("#")]
    assert samples
    for line in samples:
        name_and_labels, _, value = line.rpartition(" ")
        assert name_and_labels, line
        float(value)  # every sample ends in a number
    assert any(topic in line for line in samples), "topic-level metrics name the topic"


def test_scrapes_at_once_each_name_every_topic_once_with_its_count(broker: BrokerProcess,
                                                                   client: pulsar.Client) -> None:
    """A scrape reads topics a slice at a time and hands each slice's rows to its own child
    process; several scrapes at once, over more topics than one slice holds, must each
    report every topic once, with what it was sent."""
    topics = {f"persistent://public/default/many-{uuid.uuid4().hex[:8]}-{i}": i % 3 + 1 for i in range(60)}
    for name, count in topics.items():
        producer = client.create_producer(name, batching_enabled=False)
        for _ in range(count):
            producer.send(b"x")
        producer.close()
    with ThreadPoolExecutor(3) as pool:
        bodies = list(pool.map(lambda _: get(f"{broker.web_url}/metrics")[2], range(3)))
    for body in bodies:
        found: dict[str, list[float]] = {}
        for line in body.splitlines():
            if line.startswith("pulsar_in_messages_total{"):
                labels, _, value = line.rpartition(" ")
                name = labels.split('topic="', 1)[1].split('"', 1)[0]
                found.setdefault(name, []).append(float(value))
        assert {name: found.get(name) for name in topics} == {name: [float(n)] for name, n in topics.items()}
