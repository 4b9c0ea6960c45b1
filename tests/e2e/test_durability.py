"""Durability: kill -9, clean shutdown, trimming consumed segments, torn segment tails.

Each test runs its own broker, because each stops or kills it.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from e2e_helpers import EARLIEST, drain, new_topic, quiet_logger, receive_n, segment_files, wait_until
from pulsar.schema import StringSchema

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, pb


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(**config: str) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / "data", config=config)
        started.append(proc)
        return proc.start()

    yield make  # type: ignore[misc]
    for proc in started:
        proc.kill()


def connect(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=15, logger=quiet_logger())


def get_or_create_schema(broker: BrokerProcess, topic: str, schema: pb.Schema) -> bytes:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=1, topic=topic, schema=schema)))
        return bytes(conn.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse.schema_version)


def get_schema(broker: BrokerProcess, topic: str) -> pb.CommandGetSchemaResponse:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(pb.BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=1, topic=topic)))
        return conn.expect(T.GET_SCHEMA_RESPONSE).command.getSchemaResponse


STRING = pb.Schema(name="STRING", schema_data=b"null", type=pb.Schema.String)
#: another type: accepted only because the test's broker allows any change
JSON = pb.Schema(name="json", schema_data=b'{"type": "record", "name": "R", "fields": []}', type=pb.Schema.Json)


def test_kill_9_after_receipts_loses_nothing(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker(schemaCompatibilityStrategy="ALWAYS_COMPATIBLE")
    topic = new_topic()
    client = connect(broker)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    assert get_or_create_schema(broker, topic, STRING) == struct.pack(">q", 0)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2)
    for i in range(500):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()  # every receipt is in: all 500 are acknowledged as stored
    for m in receive_n(consumer, 200):
        consumer.acknowledge(m)
    broker.kill()
    with contextlib.suppress(pulsar.PulsarException):
        client.close()  # its broker is gone: closing may report NotConnected, which is not under test

    broker.start()
    client = connect(broker)
    try:
        everything = client.subscribe(topic, "fresh", initial_position=EARLIEST)
        assert [m.data() for m in receive_n(everything, 500)] == [f"m{i}".encode() for i in range(500)]
        resumed = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        # Redelivery is allowed, loss is not: every message not yet acknowledged comes back.
        missing = {f"m{i}".encode() for i in range(200, 500)}
        while missing:
            missing.discard(resumed.receive(timeout_millis=5000).data())
        # Schema versions are metadata too: version 0 is still STRING, a new schema is version 1.
        stored = get_schema(broker, topic)
        assert not stored.HasField("error_code") and stored.schema.type == pb.Schema.String
        assert stored.schema_version == struct.pack(">q", 0)
        assert get_or_create_schema(broker, topic, JSON) == struct.pack(">q", 1)
    finally:
        client.close()


def test_sigterm_exits_zero_and_keeps_cursors(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker()
    topic = new_topic()
    client = connect(broker)
    try:
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        client.subscribe(topic, "gone").unsubscribe()
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        for m in receive_n(consumer, 6):
            consumer.acknowledge(m)
        consumer.close()  # flushes the grouped acks before the close is answered
        # The producer stays connected: shutting down with clients attached still exits 0.
        assert broker.stop() == 0
        assert "shutting down" in broker.log_tail()
    finally:
        client.close()

    broker.start()
    client = connect(broker)
    try:
        resumed = client.subscribe(topic, "s")
        assert [m.data() for m in drain(resumed)] == [f"m{i}".encode() for i in range(6, 10)]
        # The deleted subscription stays deleted: a new one at Latest has no backlog.
        assert drain(client.subscribe(topic, "gone")) == []
    finally:
        client.close()


def test_segments_consumed_by_every_subscription_are_deleted(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker(managedLedgerMaxEntriesPerLedger="10", retentionCheckIntervalInSeconds="1")
    topic = new_topic()
    client = connect(broker)
    try:
        fast = client.subscribe(topic, "fast")
        slow = client.subscribe(topic, "slow")
        producer = client.create_producer(topic)
        for i in range(50):
            producer.send(f"m{i}".encode())
        assert len(segment_files(broker.data_dir, topic)) >= 5
        for m in receive_n(fast, 50):
            fast.acknowledge(m)
        slow_got = receive_n(slow, 50)
        for m in slow_got[:25]:
            slow.acknowledge(m)
        # The slow subscription still needs ledgers from entry 25 on.
        wait_until(lambda: len(segment_files(broker.data_dir, topic)) <= 4, what="first ledgers trimmed")
        assert len(segment_files(broker.data_dir, topic)) >= 3
        for m in slow_got[25:]:
            slow.acknowledge(m)
        wait_until(lambda: len(segment_files(broker.data_dir, topic)) == 1, what="consumed ledgers trimmed")
        producer.send(b"after trimming")
        assert fast.receive(timeout_millis=5000).data() == b"after trimming"
    finally:
        client.close()


def test_torn_segment_tail_is_recovered(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker()
    topic = new_topic()
    client = connect(broker)
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    client.close()
    assert broker.stop() == 0

    last = [f for f in segment_files(broker.data_dir, topic) if f.stat().st_size > 64][-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 3)  # a torn write: the last record lost its tail

    broker.start()
    client = connect(broker)
    try:
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        assert [m.data() for m in drain(consumer)] == [f"m{i}".encode() for i in range(19)]
        assert "torn or corrupt tail" in broker.log_tail(100)  # the topic is recovered when it is opened
        client.create_producer(topic).send(b"after recovery")
        assert consumer.receive(timeout_millis=5000).data() == b"after recovery"
    finally:
        client.close()


def test_clients_reconnect_after_a_broker_restart(make_broker) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker()
    topic = new_topic()
    client = connect(broker)
    try:
        consumer = client.subscribe(topic, "s", schema=StringSchema())
        producer = client.create_producer(topic, producer_name="steady", schema=StringSchema())
        producer.send("before")
        first = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(first)
        broker.kill()
        broker.start()
        # Both notice, reconnect (the producer with its name and a higher epoch) and carry on.
        producer.send("after")
        got = [consumer.receive(timeout_millis=10000)]
        if got[0].value() == "before":  # the ack may not have been stored before the kill: redelivered
            got.append(consumer.receive(timeout_millis=10000))
        assert got[-1].value() == "after"
        assert {m.producer_name() for m in got} == {"steady"}
        # The same schema keeps its version across the restart.
        assert {m.schema_version() for m in [first, *got]} == {first.schema_version()}
    finally:
        client.close()
