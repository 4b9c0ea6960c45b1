"""Delayed delivery with the official client: deliver_after / deliver_at on Shared and Key_Shared."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection
from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand.Type

TICK_MS = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Non-strict delivery may be one tick early, as in Pulsar: a short tick keeps it tight."""
    proc = BrokerProcess(tmp_path_factory.mktemp("delayed") / "data",
                         {"delayedDeliveryTickTimeMillis": str(TICK_MS)}).start()
    yield proc
    proc.kill()


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_deliver_after_waits_then_arrives(client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic)
    sent_at = time.time()
    producer.send(b"later", deliver_after=pulsar.timedelta(milliseconds=1500), partition_key="k")
    producer.send(b"now", partition_key="other")
    first = consumer.receive(timeout_millis=5000)
    assert first.data() == b"now"
    consumer.acknowledge(first)
    second = consumer.receive(timeout_millis=10000)
    assert second.data() == b"later"
    assert time.time() - sent_at >= 1.5 - TICK_MS / 1000 - 0.05
    consumer.acknowledge(second)


def test_exclusive_ignores_delay(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    producer.send(b"x", deliver_after=pulsar.timedelta(seconds=60))
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == b"x"


def test_deliver_at_absolute_time(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    at_ms = int(time.time() * 1000) + 1000
    producer.send(b"at", deliver_at=at_ms)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)
    msg = consumer.receive(timeout_millis=10000)
    assert msg.data() == b"at"
    assert time.time() * 1000 >= at_ms - TICK_MS - 50


def test_a_delay_beyond_the_maximum_is_refused(tmp_path: Path) -> None:
    """NotAllowedError with Pulsar's message. (The C++-based clients answer any send error
    but a checksum error by reconnecting, so the frames are checked with a raw connection.)"""
    with BrokerProcess(tmp_path / "data", {"delayedDeliveryMaxDelayInMillis": "5000"}) as broker, \
            RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.create_producer("persistent://public/default/max-delay")
        now = int(time.time() * 1000)
        late = pb.MessageMetadata(publish_time=now, deliver_at_time=now + 60_000)
        conn.send_message(0, 0, b"too late", metadata=late)
        error = conn.expect(T.SEND_ERROR).command.send_error
        assert error.error == pb.ServerError.NotAllowedError
        assert "Exceeds max allowed delivery delay of 5000 milliseconds" in error.message
        within = pb.MessageMetadata(publish_time=now, deliver_at_time=now + 4_000)
        conn.send_message(0, 1, b"within", metadata=within)
        receipt = conn.expect(T.SEND_RECEIPT).command.send_receipt
        assert receipt.sequence_id == 1
