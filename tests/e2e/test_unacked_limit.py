"""``maxUnackedMessagesPerConsumer`` and ``maxUnackedMessagesPerSubscription`` on Shared
subscriptions: block at the limit, unblock at half."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import EARLIEST, drain, new_topic, nothing_arrives, quiet_logger, receive_n

from magnetar.testing.broker_process import BrokerProcess

LIMIT = 10
SUBSCRIPTION_LIMIT = 15


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("unacked") / "data"
    proc = BrokerProcess(data, config={"maxUnackedMessagesPerConsumer": str(LIMIT),
                                       "maxUnackedMessagesPerSubscription": str(SUBSCRIPTION_LIMIT)}).start()
    yield proc
    proc.kill()


def test_consumer_blocks_at_the_limit_and_unblocks_at_half(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=EARLIEST)
        producer = client.create_producer(topic)
        for i in range(3 * LIMIT):
            producer.send(f"m{i}".encode())
        held = receive_n(consumer, LIMIT)
        assert nothing_arrives(consumer, 500), "the broker must stop at maxUnackedMessagesPerConsumer"
        for m in held[: LIMIT // 2 - 1]:
            consumer.acknowledge(m)
        assert nothing_arrives(consumer, 500), "still more than half unacknowledged: stay blocked"
        consumer.acknowledge(held[LIMIT // 2 - 1])
        more = receive_n(consumer, LIMIT // 2)
        assert [m.data() for m in more] == [f"m{i}".encode() for i in range(LIMIT, LIMIT + LIMIT // 2)]
    finally:
        client.close()


def test_blocked_consumer_does_not_block_the_others(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        topic = new_topic()
        greedy = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, consumer_name="greedy")
        producer = client.create_producer(topic)
        for i in range(LIMIT):
            producer.send(f"m{i}".encode())
        receive_n(greedy, LIMIT)
        other = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, consumer_name="other")
        for i in range(LIMIT, LIMIT + 5):
            producer.send(f"m{i}".encode())
        assert [m.data() for m in receive_n(other, 5)] == [f"m{i}".encode() for i in range(LIMIT, LIMIT + 5)]
        assert nothing_arrives(greedy, 300)
    finally:
        client.close()


def test_subscription_blocks_at_its_limit_and_unblocks_at_half(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        topic = new_topic()
        consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, consumer_name=name)
                     for name in ("first", "second")]
        producer = client.create_producer(topic)
        for i in range(3 * SUBSCRIPTION_LIMIT):
            producer.send(f"m{i}".encode())
        held = [(consumer, m) for consumer in consumers for m in drain(consumer)]
        # Each consumer is below its own limit of 10; together they hit the subscription's 15.
        assert len(held) == SUBSCRIPTION_LIMIT, "the broker must stop at maxUnackedMessagesPerSubscription"
        for consumer, m in held[: SUBSCRIPTION_LIMIT - SUBSCRIPTION_LIMIT // 2]:
            consumer.acknowledge(m)
        more = [m for consumer in consumers for m in drain(consumer)]
        assert more, "acknowledging down to half the limit unblocks the subscription"
        assert {m.data() for m in more}.isdisjoint({m.data() for _, m in held})
    finally:
        client.close()
