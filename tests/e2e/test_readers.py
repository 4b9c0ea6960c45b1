"""Readers (non-durable subscriptions), has_message_available, seek and the last message id."""

from __future__ import annotations

import time

import pulsar
from e2e_helpers import EARLIEST, receive_n


def produce(client: pulsar.Client, topic: str, count: int) -> tuple[list[pulsar.MessageId], list[int]]:
    """Send ``count`` messages; also return, per message, a time later than its publish time
    and no later than the next message's (publish times have millisecond resolution)."""
    producer = client.create_producer(topic)
    ids, after = [], []
    for i in range(count):
        ids.append(producer.send(f"m{i}".encode()))
        stored_ms = int(time.time() * 1000)
        while int(time.time() * 1000) <= stored_ms:
            time.sleep(0.001)
        after.append(stored_ms + 1)
    producer.close()
    return ids, after


def read(reader: pulsar.Reader, count: int) -> list[bytes]:
    return [reader.read_next(5000).data() for _ in range(count)]


def read_rest(reader: pulsar.Reader) -> list[bytes]:
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000).data())
    return got


def test_reader_from_earliest_reads_everything(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available()
    got = [reader.read_next(5000) for _ in range(5)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.message_id() for m in got] == ids
    assert not reader.has_message_available()


def test_reader_from_a_message_id_is_exclusive_by_default(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 6)
    reader = client.create_reader(topic, ids[2])
    assert read_rest(reader) == [b"m3", b"m4", b"m5"]


def test_reader_from_a_message_id_inclusive(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 6)
    reader = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert read_rest(reader) == [b"m2", b"m3", b"m4", b"m5"]


def test_reader_from_the_last_message_inclusive(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 3)
    reader = client.create_reader(topic, ids[-1], start_message_id_inclusive=True)
    assert read_rest(reader) == [b"m2"]


def test_reader_from_latest_sees_only_new_messages(client: pulsar.Client, topic: str) -> None:
    produce(client, topic, 3)
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    client.create_producer(topic).send(b"new")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"new"
    assert not reader.has_message_available()


def test_has_message_available_on_an_empty_topic(client: pulsar.Client, topic: str) -> None:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    client.create_producer(topic).send(b"first")
    assert reader.has_message_available()


def test_reader_seek_by_message_id(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 8)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read(reader, 8) == [f"m{i}".encode() for i in range(8)]
    reader.seek(ids[3])
    assert read(reader, 2) == [b"m4", b"m5"]  # exclusive reader: the target itself is skipped
    inclusive = client.create_reader(topic, pulsar.MessageId.earliest, start_message_id_inclusive=True)
    assert read(inclusive, 8)[-1] == b"m7"
    inclusive.seek(ids[6])
    assert read(inclusive, 2) == [b"m6", b"m7"]


def test_reader_seek_by_time(client: pulsar.Client, topic: str) -> None:
    _, after = produce(client, topic, 6)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read(reader, 6)[-1] == b"m5"
    reader.seek(after[2])  # the first message published at or after that time is m3
    assert read_rest(reader) == [b"m3", b"m4", b"m5"]


def test_consumer_seek_rewinds_a_durable_subscription(client: pulsar.Client, topic: str) -> None:
    ids, after = produce(client, topic, 6)
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    for m in receive_n(consumer, 6):
        consumer.acknowledge(m)
    consumer.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in receive_n(consumer, 2)] == [b"m0", b"m1"]
    consumer.seek(after[3])
    assert [m.data() for m in receive_n(consumer, 2)] == [b"m4", b"m5"]
    consumer.seek(ids[1])
    assert consumer.receive(timeout_millis=5000).data() == b"m2"


def test_last_message_id(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    ids, _ = produce(client, topic, 4)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


def test_last_message_id_of_a_batch_names_its_last_index(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000)
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    last = consumer.get_last_message_id()
    assert last.batch_index() == 2


def test_reader_closing_drops_its_subscription(client: pulsar.Client, topic: str) -> None:
    produce(client, topic, 2)
    for _ in range(3):
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert read(reader, 2) == [b"m0", b"m1"]
        reader.close()
    # No durable backlog was left behind: a new durable subscription at Latest sees nothing old.
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"after")
    assert consumer.receive(timeout_millis=5000).data() == b"after"


def test_seek_beyond_the_last_message_keeps_what_comes_next(client: pulsar.Client, topic: str) -> None:
    ids, _ = produce(client, topic, 2)
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    for m in receive_n(consumer, 2):
        consumer.acknowledge(m)
    future = pulsar.MessageId(-1, ids[-1].ledger_id() + 1000, 7, -1)
    consumer.seek(future)
    consumer.close()
    client.create_producer(topic).send(b"published after the seek")
    # A subscription moved past the end must not swallow what is appended below that id.
    again = client.subscribe(topic, "s")
    assert again.receive(timeout_millis=5000).data() == b"published after the seek"
