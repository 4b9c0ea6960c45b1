"""Producer deduplication with the official client against a real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import read_topic

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("dedup") / "data",
                         {"brokerDeduplicationEnabled": "true", "brokerDeduplicationEntriesInterval": "10"}).start()
    yield proc
    proc.kill()


def test_explicit_sequence_ids_are_deduplicated(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p-dedup")
    for i in range(5):
        producer.send(f"m{i}".encode(), sequence_id=i)
    producer.send(b"again", sequence_id=3)
    producer.send(b"m5", sequence_id=5)
    assert read_topic(client, topic) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_producer_resumes_from_last_sequence_id(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p-resume")
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    again = client.create_producer(topic, producer_name="p-resume")
    assert again.last_sequence_id() == 2
    again.send(b"m3")
    assert read_topic(client, topic) == [b"m0", b"m1", b"m2", b"m3"]


def test_dedup_survives_kill_and_restart(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    producer = client.create_producer(topic, producer_name="p-crash")
    for i in range(25):
        producer.send(f"m{i}".encode(), sequence_id=i)
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    producer = client.create_producer(topic, producer_name="p-crash")
    assert producer.last_sequence_id() == 24
    for i in range(20, 30):
        producer.send(f"m{i}".encode(), sequence_id=i)
    assert read_topic(client, topic) == [f"m{i}".encode() for i in range(30)]
    client.close()
