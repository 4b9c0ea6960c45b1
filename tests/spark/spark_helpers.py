"""Helpers the Spark tests share: fresh names, producing, reading a topic back, admin calls."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import pulsar

from magnetar.testing import polling

V = TypeVar("V")
#: Entries per ledger on the test broker: small, so a few hundred messages span several ledgers.
LEDGER_ENTRIES = 20


def new_topic(prefix: str = "t", namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/{prefix}-{uuid.uuid4().hex[:10]}"


def client_for(service_url: str) -> pulsar.Client:
    return pulsar.Client(service_url, operation_timeout_seconds=15,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def produce(client: pulsar.Client, topic: str, values: list[bytes], *, batching: bool = True,
            keys: Callable[[int], str | None] | None = None,
            properties: Callable[[int], dict[str, str] | None] | None = None,
            event_times: Callable[[int], int | None] | None = None) -> list[pulsar.MessageId]:
    """Publish and wait; returns each message's id in order."""
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=50,
                                      block_if_queue_full=True,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    ids: list[Any] = [None] * len(values)

    def done(i: int) -> Callable[[Any, Any], None]:
        def callback(result: Any, message_id: Any) -> None:
            ids[i] = message_id if result == pulsar.Result.Ok else result
        return callback

    for i, value in enumerate(values):
        producer.send_async(value, done(i),
                            partition_key=keys(i) if keys else None,
                            properties=properties(i) if properties else None,
                            event_timestamp=event_times(i) if event_times else None)
    producer.flush()
    wait_until(lambda: all(m is not None for m in ids), what="send receipts")
    producer.close()
    failed = [m for m in ids if not hasattr(m, "ledger_id")]
    assert not failed, f"{len(failed)} sends failed: {failed[:3]}"
    return ids


def read_values(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every message of every partition of the topic, by a Reader from the earliest."""
    out: list[bytes] = []
    for partition in client.get_topic_partitions(topic):
        reader = client.create_reader(partition, pulsar.MessageId.earliest, receiver_queue_size=5000)
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=10_000).data())
        reader.close()
    return out


def wait_until(predicate: Callable[[], V], timeout_s: float = 20.0, what: str = "condition") -> V:
    """As :func:`magnetar.testing.polling.wait_until`, with the longer default a Spark job needs."""
    return polling.wait_until(predicate, timeout_s, what, interval_s=0.05)


class Admin:
    """The admin REST calls the tests make to set up and inspect topics."""

    def __init__(self, web_url: str) -> None:
        self.http = httpx.Client(base_url=f"{web_url}/admin/v2", timeout=15)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    @staticmethod
    def path(topic: str) -> str:
        return topic.replace("://", "/", 1)

    def create_namespace(self, namespace: str, *, deduplication: bool | None = None) -> None:
        resp = self.http.put(f"/namespaces/{namespace}")
        assert resp.status_code in (204, 409), resp.text
        if deduplication is not None:
            resp = self.http.post(f"/namespaces/{namespace}/deduplication", json=deduplication)
            assert resp.status_code == 204, resp.text

    def create_partitioned(self, topic: str, partitions: int) -> None:
        resp = self.http.put(f"/{self.path(topic)}/partitions", json=partitions)
        assert resp.status_code == 204, resp.text

    def create_topic(self, topic: str) -> None:
        resp = self.http.put(f"/{self.path(topic)}")
        assert resp.status_code == 204, resp.text

    def get(self, topic: str, what: str) -> Any:
        resp = self.http.get(f"/{self.path(topic)}/{what}")
        assert resp.status_code == 200, resp.text
        return resp.json()
