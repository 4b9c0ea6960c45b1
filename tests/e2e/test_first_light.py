"""The official client's basic round trip against a real broker process."""

from __future__ import annotations

import pulsar


def test_produce_then_consume_from_earliest(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(10)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    assert [m.message_id() for m in got] == sent
    for m in got:
        consumer.acknowledge(m)
    assert got[0].redelivery_count() == 0


def test_subscribe_then_produce_latest(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"x", partition_key="k", properties={"a": "1"})
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == b"x"
    assert msg.partition_key() == "k"
    assert msg.properties() == {"a": "1"}
    consumer.acknowledge(msg)
