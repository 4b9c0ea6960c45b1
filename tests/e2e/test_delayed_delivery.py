"""Delayed delivery with the official client: deliver_after / deliver_at on Shared and Key_Shared."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.testing.broker_process import BrokerProcess

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
