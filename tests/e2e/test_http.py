"""The HTTP port: health check and Prometheus metrics, served next to the binary protocol."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pulsar
from e2e_helpers import receive_n
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing.broker_process import BrokerProcess


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:  # what is checked is the content; a busy machine is slow
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


def web_address(broker: BrokerProcess) -> tuple[str, int]:
    host, port = broker.web_url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


#: a family from the loop before the rows, one of the rows, and one the loop writes after them
EVERY_PART = {"process_virtual_memory_bytes", "pulsar_in_messages", "pulsar_ml_cache_used_size"}


def family_names(body: str) -> set[str]:
    """The families of a scrape; the text must parse as Prometheus text to its end."""
    return {family.name for family in text_string_to_metric_families(body)}


def sent_one(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"x")
    producer.close()


def test_scrapes_on_one_connection_are_whole_and_leave_it_usable(broker: BrokerProcess,
                                                                client: pulsar.Client, topic: str) -> None:
    """An HTTP/1.1 scrape's rows are written to the scraper's socket by the child process
    that makes their text, between what the web server writes before (the process
    families) and after (the broker's own families): each response on a kept-alive
    connection must be whole, and the connection fit for the next request."""
    sent_one(client, topic)
    connection = http.client.HTTPConnection(*web_address(broker), timeout=30)
    try:
        for _ in range(2):
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode()
            assert response.status == 200
            assert response.getheader("Transfer-Encoding") == "chunked"
            assert EVERY_PART <= family_names(body)
            assert f'topic="{topic}"' in body
        connection.request("GET", "/admin/v2/brokers/health")
        response = connection.getresponse()
        assert (response.status, response.read().strip(b'"')) == (200, b"ok")
    finally:
        connection.close()


def test_an_http_10_scrape_is_whole(broker: BrokerProcess, client: pulsar.Client, topic: str) -> None:
    """HTTP/1.0 has no chunks: its text passes through the loop, the body ends at close."""
    sent_one(client, topic)
    with socket.create_connection(web_address(broker), timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        received = bytearray()
        while data := sock.recv(1 << 16):
            received += data
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"chunked" not in head.lower()
    assert EVERY_PART <= family_names(body.decode())
    assert f'topic="{topic}"'.encode() in body


def children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def test_a_scraper_that_leaves_at_once_leaves_no_child_behind(broker: BrokerProcess, client: pulsar.Client,
                                                              topic: str) -> None:
    sent_one(client, topic)
    for _ in range(5):
        with socket.create_connection(web_address(broker), timeout=30) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n")
    deadline = time.monotonic() + 30
    while children(broker.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children(broker.proc.pid) == []
    status, _, body = get(f"{broker.web_url}/metrics")
    assert status == 200 and f'topic="{topic}"' in body
