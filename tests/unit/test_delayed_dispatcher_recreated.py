"""A delayed entry that came due goes out once when a subscription's dispatcher is made anew.

A new dispatcher (the last consumer left and another joined, or the subscription type
changed) reads again from the mark-delete position, while the subscription's tracker
lives on: an entry it hands back as due must not also be delivered from that re-read.
"""

from __future__ import annotations

import pytest
from core_sinks import RecordingSink

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.delayed_delivery import DelayedDelivery
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

TICK_MS = 10




def delayed_topic() -> Topic:
    config = BrokerConfig(delayedDeliveryTickTimeMillis=TICK_MS, isDelayedDeliveryDeliverAtTimeStrict=True)
    topic = Topic(TopicName.parse("t"), MemoryLedger("t"), config)
    topic.delayed = DelayedDelivery(config)
    return topic


def publish(topic: Topic, sequence_id: int, deliver_at_ms: int | None = None) -> Position:
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    meta = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    if deliver_at_ms is not None:
        meta.deliver_at_time = deliver_at_ms
    pos = append_entry(topic, producer, sequence_id, sequence_id, 1, make_entry(meta, b"x"), 0)
    topic.on_persisted(pos, 0)
    return pos


def join(topic: Topic, consumer_id: int, sub_type: str, now_ms: int) -> tuple[Consumer, RecordingSink]:
    sink = RecordingSink()
    consumer = Consumer(consumer_id, f"c{consumer_id}", sink, sub_type=sub_type)  # type: ignore[arg-type]
    sub = topic.subscribe("s", consumer, now_ms)
    sub.dispatcher.on_flow(consumer, 1000, now_ms)
    return consumer, sink


@pytest.mark.parametrize("second_type", ["Shared", "Key_Shared"])
@pytest.mark.parametrize("first_type", ["Shared", "Key_Shared"])
def test_due_entry_goes_out_once_after_the_last_consumer_left(first_type: str, second_type: str) -> None:
    topic = delayed_topic()
    first, first_sink = join(topic, 1, first_type, 0)
    delayed = publish(topic, 0, deliver_at_ms=100)
    plain = publish(topic, 1)
    assert first_sink.messages == [plain]
    topic.remove_consumer(topic.subscriptions["s"], first, 50)
    _, sink = join(topic, 2, second_type, 200)
    assert sorted(sink.messages) == [delayed, plain]


def test_due_entry_goes_out_once_when_it_comes_due_during_the_re_read() -> None:
    topic = delayed_topic()
    first, _ = join(topic, 1, "Shared", 0)
    delayed = [publish(topic, i, deliver_at_ms=100 + i) for i in range(3)]
    plain = publish(topic, 3)
    topic.remove_consumer(topic.subscriptions["s"], first, 50)
    _, sink = join(topic, 2, "Shared", 60)
    assert sink.messages == [plain]
    sub = topic.subscriptions["s"]
    sub.dispatcher.begin_round()
    sub.dispatcher.dispatch(300)
    assert sorted(sink.messages) == sorted([*delayed, plain])


def test_due_entry_still_out_at_a_consumer_is_not_sent_again_after_a_rewind() -> None:
    topic = delayed_topic()
    consumer, sink = join(topic, 1, "Shared", 0)
    delayed = publish(topic, 0, deliver_at_ms=100)
    sub = topic.subscriptions["s"]
    sub.dispatcher.begin_round()
    sub.dispatcher.dispatch(200)
    assert sink.messages == [delayed]
    sub.dispatcher.rewind()
    sub.dispatcher.begin_round()
    sub.dispatcher.dispatch(220)
    assert sink.messages == [delayed]
    assert delayed in consumer.pending


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_a_re_read_passes_over_held_entries_without_reading_them(sub_type: str) -> None:
    topic = delayed_topic()
    first, _ = join(topic, 1, sub_type, 0)
    held = [publish(topic, i, deliver_at_ms=10_000 + i) for i in range(900)]
    plain = publish(topic, 900)
    topic.remove_consumer(topic.subscriptions["s"], first, 1)
    reads: list[Position] = []
    read = topic.ledger.read

    def counting_read(pos: Position) -> bytes:
        reads.append(pos)
        return read(pos)

    topic.ledger.read = counting_read  # type: ignore[method-assign]
    _, sink = join(topic, 2, sub_type, 2)
    assert sink.messages == [plain]
    assert len(reads) <= 3, f"read {len(reads)} entries the tracker holds"
    sub = topic.subscriptions["s"]
    sub.dispatcher.begin_round()
    sub.dispatcher.dispatch(20_000)
    assert sorted(sink.messages) == sorted([*held, plain])
