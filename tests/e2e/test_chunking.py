"""Chunked messages on a broker with a small ``maxMessageSize``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, quiet_logger, receive_n

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection

MAX_MESSAGE_SIZE = 100_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("chunking") / "data"
    proc = BrokerProcess(data, config={"maxMessageSize": str(MAX_MESSAGE_SIZE)}).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


def test_connected_advertises_the_configured_max_message_size(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        assert conn.handshake().max_message_size == MAX_MESSAGE_SIZE


def test_chunked_message_round_trips(client: pulsar.Client) -> None:
    topic = new_topic()
    big = os.urandom(350_000)
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    producer.send(b"small before")
    producer.send(big, properties={"kind": "big"})
    producer.send(b"small after")
    got = receive_n(consumer, 3, timeout_ms=10000)
    assert [m.data() for m in got] == [b"small before", big, b"small after"]
    assert got[1].properties() == {"kind": "big"}
    for m in got:
        consumer.acknowledge(m)


def test_chunked_message_is_redelivered_whole(client: pulsar.Client) -> None:
    topic = new_topic()
    big = os.urandom(250_000)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    producer.send(big)
    first = consumer.receive(timeout_millis=10000)
    assert first.data() == big
    consumer.negative_acknowledge(first)
    again = consumer.receive(timeout_millis=10000)
    assert again.data() == big
    assert again.redelivery_count() == 1


def test_message_over_the_limit_without_chunking_is_refused(client: pulsar.Client) -> None:
    producer = client.create_producer(new_topic())
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(os.urandom(MAX_MESSAGE_SIZE + 1))
    assert producer.send(b"fits") is not None
