"""Partitioned topics: auto-created with defaultNumPartitions, routing modes, partitioned Failover."""

from __future__ import annotations

import re
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import EARLIEST, drain, new_topic, nothing_arrives, quiet_logger, receive_n

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, partitioned_metadata

PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("partitioned") / "data"
    proc = BrokerProcess(data, config={"allowAutoTopicCreationType": "partitioned",
                                       "defaultNumPartitions": str(PARTITIONS)}).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


def test_auto_created_topic_has_the_default_partition_count(broker: BrokerProcess) -> None:
    topic = new_topic()
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(partitioned_metadata(topic, 1))
        first = conn.expect_reply(1, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        conn.send_command(partitioned_metadata(f"{topic}-partition-2", 2))
        partition = conn.expect_reply(2, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    assert first.partitions == PARTITIONS
    assert partition.HasField("partitions") and partition.partitions == 0


def test_round_robin_routing_uses_every_partition(client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    ids = [producer.send(f"m{i}".encode()) for i in range(4 * PARTITIONS)]
    assert Counter(i.partition() for i in ids) == {p: 4 for p in range(PARTITIONS)}
    got = receive_n(consumer, 4 * PARTITIONS)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(4 * PARTITIONS))
    for m in got:
        assert m.topic_name() == f"{topic}-partition-{m.message_id().partition()}"
        consumer.acknowledge(m)


def test_single_partition_routing_keeps_one_partition(client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.UseSinglePartition)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    assert len({i.partition() for i in ids}) == 1
    # One partition keeps the order.
    assert [m.data() for m in receive_n(consumer, 10)] == [f"m{i}".encode() for i in range(10)]


def test_keyed_messages_hash_to_a_stable_partition(client: pulsar.Client) -> None:
    topic = new_topic()
    producer = client.create_producer(topic)
    seen: dict[str, set[int]] = {}
    for i in range(40):
        key = f"key-{i % 5}"
        seen.setdefault(key, set()).add(producer.send(b"x", partition_key=key).partition())
    assert all(len(partitions) == 1 for partitions in seen.values())


def test_custom_router_picks_the_partition(client: pulsar.Client) -> None:
    topic = new_topic()

    def by_crc(msg: pulsar.Message, num_partitions: int) -> int:
        return zlib.crc32(msg.partition_key().encode()) % num_partitions

    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic, message_router=by_crc)
    keys = [f"user-{i}" for i in range(12)]
    for key in keys:
        msg_id = producer.send(key.encode(), partition_key=key)
        assert msg_id.partition() == zlib.crc32(key.encode()) % PARTITIONS
    got = receive_n(consumer, len(keys))
    for m in got:
        assert m.message_id().partition() == zlib.crc32(m.partition_key().encode()) % PARTITIONS


def test_partitioned_failover_assigns_partitions_by_index(client: pulsar.Client) -> None:
    topic = new_topic()
    # Sorted by name, "a" is consumer 0 and "b" consumer 1: partition i goes to consumer i % 2.
    second = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    producer = client.create_producer(topic)
    for i in range(4 * PARTITIONS):
        producer.send(f"m{i}".encode())
    got_first = receive_n(first, 2 * PARTITIONS)
    got_second = receive_n(second, 2 * PARTITIONS)
    assert {m.message_id().partition() for m in got_first} == {0, 2}
    assert {m.message_id().partition() for m in got_second} == {1, 3}
    # The consumer of partitions 0 and 2 leaves: the other takes them over, unacked messages included.
    for m in got_second:
        second.acknowledge(m)
    first.close()
    taken_over = receive_n(second, 2 * PARTITIONS)
    assert {m.message_id().partition() for m in taken_over} == {0, 2}
    assert nothing_arrives(second)


def test_consumer_on_one_partition(client: pulsar.Client) -> None:
    topic = new_topic()
    producer = client.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    ids = [producer.send(f"m{i}".encode()) for i in range(2 * PARTITIONS)]
    consumer = client.subscribe(f"{topic}-partition-1", "s", initial_position=EARLIEST)
    got = drain(consumer)
    assert [m.message_id() for m in got] == [i for i in ids if i.partition() == 1]
    assert len(got) == 2


def test_batched_messages_on_a_partitioned_topic(client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(200):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 7}")
    producer.flush()
    got = receive_n(consumer, 200)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(200))


def test_pattern_subscription_covers_every_partition(client: pulsar.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    name = f"persistent://public/default/pattern-{tag}"
    producer = client.create_producer(name)
    ids = [producer.send(f"m{i}".encode()) for i in range(2 * PARTITIONS)]
    assert {i.partition() for i in ids} == set(range(PARTITIONS))
    consumer = client.subscribe(re.compile(f"persistent://public/default/pattern-{tag}.*"), "s",
                                initial_position=EARLIEST)
    got = receive_n(consumer, 2 * PARTITIONS)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(2 * PARTITIONS))
    assert nothing_arrives(consumer)


def test_seek_by_time_on_a_partitioned_topic(client: pulsar.Client) -> None:
    topic = new_topic()
    producer = client.create_producer(topic)
    for i in range(2 * PARTITIONS):
        producer.send(f"old{i}".encode())
    boundary_ms = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= boundary_ms:
        time.sleep(0.001)
    for i in range(PARTITIONS):
        producer.send(f"new{i}".encode())
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    assert len(receive_n(consumer, 3 * PARTITIONS)) == 3 * PARTITIONS
    consumer.seek(boundary_ms)
    assert sorted(m.data() for m in drain(consumer)) == sorted(f"new{i}".encode() for i in range(PARTITIONS))


def test_reader_on_a_partitioned_topic(client: pulsar.Client) -> None:
    topic = new_topic()
    producer = client.create_producer(topic)
    for i in range(2 * PARTITIONS):
        producer.send(f"m{i}".encode())
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(5000).data() for _ in range(2 * PARTITIONS)]
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(2 * PARTITIONS))
    assert not reader.has_message_available()
