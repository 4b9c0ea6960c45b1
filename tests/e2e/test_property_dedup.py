"""Deduplication by a business id in a message property, within a window, across restarts."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import read_topic

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("pdedup") / "data", {
        "brokerPropertyDeduplicationEnabled": "true",
        "brokerPropertyDeduplicationWindowSeconds": "600",
        "brokerPropertyDeduplicationMaxIdsPerTopic": "1000"}).start()
    yield proc
    proc.kill()


def test_same_business_id_from_new_producers_is_dropped(client: pulsar.Client, topic: str) -> None:
    for attempt in range(3):
        producer = client.create_producer(topic)
        producer.send(f"order-1 attempt {attempt}".encode(), properties={"__dedup_id": "order-1"})
        producer.close()
    client.create_producer(topic).send(b"order-2", properties={"__dedup_id": "order-2"})
    client.create_producer(topic).send(b"no id")
    assert read_topic(client, topic) == [b"order-1 attempt 0", b"order-2", b"no id"]


def test_window_survives_restart(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    client.create_producer(topic).send(b"first", properties={"__dedup_id": "x"})
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    client.create_producer(topic).send(b"retry", properties={"__dedup_id": "x"})
    assert read_topic(client, topic) == [b"first"]
    client.close()
