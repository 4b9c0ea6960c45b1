"""Producers: access modes, generated and chosen names."""

from __future__ import annotations

import contextlib
import threading

import pulsar
import pytest
from e2e_helpers import EARLIEST, quiet_logger, receive_n

from magnetar.testing.broker_process import BrokerProcess

EXCLUSIVE = pulsar.ProducerAccessMode.Exclusive
WAIT_FOR_EXCLUSIVE = pulsar.ProducerAccessMode.WaitForExclusive
FENCING = pulsar.ProducerAccessMode.ExclusiveWithFencing


def test_generated_producer_names_are_unique_and_stamped_on_messages(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    first = client.create_producer(topic)
    second = client.create_producer(topic)
    assert first.producer_name() and second.producer_name()
    assert first.producer_name() != second.producer_name()
    first.send(b"a")
    second.send(b"b")
    got = receive_n(consumer, 2)
    assert [m.producer_name() for m in got] == [first.producer_name(), second.producer_name()]


def test_chosen_producer_name_is_kept(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name="my-producer")
    assert producer.producer_name() == "my-producer"
    producer.send(b"x")
    assert consumer.receive(timeout_millis=5000).producer_name() == "my-producer"


def test_a_name_in_use_is_refused_until_released(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="unique")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="unique")
    producer.close()
    again = client.create_producer(topic, producer_name="unique")
    assert again.send(b"x") is not None


def test_exclusive_producer_refuses_a_second_one(client: pulsar.Client, topic: str) -> None:
    holder = client.create_producer(topic, access_mode=EXCLUSIVE)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=EXCLUSIVE)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)  # Shared
    assert holder.send(b"still mine") is not None


def test_exclusive_producer_is_refused_while_shared_ones_exist(client: pulsar.Client, topic: str) -> None:
    shared = client.create_producer(topic)
    with pytest.raises((pulsar.ProducerBusy, pulsar.ProducerFenced)):
        client.create_producer(topic, access_mode=EXCLUSIVE)
    shared.close()
    assert client.create_producer(topic, access_mode=EXCLUSIVE).send(b"x") is not None


def test_wait_for_exclusive_gets_access_when_the_holder_leaves(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    holder = client.create_producer(topic, access_mode=EXCLUSIVE)
    holder.send(b"from holder")
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(target=lambda: created.append(
        client.create_producer(topic, access_mode=WAIT_FOR_EXCLUSIVE)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "WaitForExclusive must wait while another producer holds the topic"
    holder.close()
    waiter.join(10)
    assert created, "the waiting producer should get access once the holder closed"
    created[0].send(b"from waiter")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"from holder", b"from waiter"]


def test_exclusive_with_fencing_takes_over(broker: BrokerProcess, client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    # The fenced producer's client reports AlreadyClosed when it closes it: keep it apart.
    fenced_client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        old = fenced_client.create_producer(topic, access_mode=EXCLUSIVE, send_timeout_millis=5000)
        old.send(b"old")
        new = client.create_producer(topic, access_mode=FENCING)
        new.send(b"new")
        with pytest.raises(pulsar.ProducerFenced):
            old.send(b"fenced out")
    finally:
        with contextlib.suppress(pulsar.AlreadyClosed):
            fenced_client.close()
    new.send(b"newer")
    assert [m.data() for m in receive_n(consumer, 3)] == [b"old", b"new", b"newer"]


def test_producer_on_a_topic_with_send_async_pipeline(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, max_pending_messages=5000)
    results: list[tuple[pulsar.Result, pulsar.MessageId]] = []
    lock = threading.Lock()

    def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        with lock:
            results.append((result, msg_id))

    for i in range(2000):
        producer.send_async(f"m{i}".encode(), done)
    producer.flush()
    assert len(results) == 2000
    assert all(r == pulsar.Result.Ok for r, _ in results)
    ids = [i for _, i in results]
    assert ids == sorted(ids)
    got = receive_n(consumer, 2000)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(2000)]
