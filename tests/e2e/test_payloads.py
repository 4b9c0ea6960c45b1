"""Batches, compression and schemas pass through the broker untouched."""

from __future__ import annotations

import os
import struct

import _pulsar
import pulsar
import pytest
from e2e_helpers import EARLIEST, receive_n
from pulsar.schema import StringSchema

CODECS = [pulsar.CompressionType.LZ4, pulsar.CompressionType.ZLib, pulsar.CompressionType.ZSTD,
          pulsar.CompressionType.SNAPPY]


def test_batched_messages_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                      batching_max_publish_delay_ms=1000)
    for i in range(200):
        producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i}")
    producer.flush()
    got = receive_n(consumer, 200)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(200)]
    assert [m.properties()["i"] for m in got] == [str(i) for i in range(200)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(200)]
    entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}
    assert len(entries) == 4
    assert {m.message_id().batch_index() for m in got} == set(range(50))
    for m in got:
        consumer.acknowledge(m)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).split(".")[-1])
def test_compressed_messages_round_trip(client: pulsar.Client, topic: str, codec: pulsar.CompressionType,
                                        batching: bool) -> None:
    payloads = [b"compressible " * 200 + str(i).encode() for i in range(20)] + [os.urandom(3000)]
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, compression_type=codec, batching_enabled=batching,
                                      batching_max_publish_delay_ms=1000)
    for data in payloads:
        producer.send_async(data, None)
    producer.flush()
    got = receive_n(consumer, len(payloads))
    assert [m.data() for m in got] == payloads


def test_string_schema_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", schema=StringSchema())
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("héllo wörld")
    msg = consumer.receive(timeout_millis=5000)
    assert msg.value() == "héllo wörld"
    assert msg.data() == "héllo wörld".encode()
    # GET_SCHEMA: the Python wrapper does not expose it, the underlying C++ client does.
    info = client._client.get_schema_info(topic, -1)
    assert info.schema_type() == _pulsar.SchemaType.STRING
    assert msg.schema_version().encode("latin-1") == struct.pack(">q", 0)


def test_schema_of_a_topic_without_one_is_not_found(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).send(b"bytes have no schema")
    with pytest.raises(pulsar.TopicNotFound):
        client._client.get_schema_info(topic, -1)


def test_properties_keys_and_event_time_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"x", properties={"a": "1", "b": "2"}, partition_key="pk", ordering_key="ok",
                  event_timestamp=1234567890123)
    msg = consumer.receive(timeout_millis=5000)
    assert msg.properties() == {"a": "1", "b": "2"}
    assert msg.partition_key() == "pk"
    assert msg.ordering_key() == "ok"
    assert msg.event_timestamp() == 1234567890123
    assert msg.producer_name() == producer.producer_name()


def test_large_message_below_the_limit(client: pulsar.Client, topic: str) -> None:
    payload = os.urandom(4 * 1024 * 1024)
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(payload)
    assert consumer.receive(timeout_millis=10000).data() == payload


def test_empty_and_null_payloads(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic)
    producer.send(b"")
    producer.send(b"after")
    got = receive_n(consumer, 2)
    assert [m.data() for m in got] == [b"", b"after"]


@pytest.mark.parametrize("receiver_queue_size", [7, 50, 1000])
def test_batches_larger_than_the_receiver_queue_flow_through(
        client: pulsar.Client, topic: str, receiver_queue_size: int) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=receiver_queue_size)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=37,
                                      batching_max_publish_delay_ms=5, max_pending_messages=5000)
    for i in range(3000):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    got = []
    for _ in range(3000):
        msg = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == [f"m{i}".encode() for i in range(3000)]
