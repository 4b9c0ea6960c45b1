"""Dispatch rules the end-to-end suite found broken, pinned at the core level.

Each test names the behaviour; the e2e test that found it lives in tests/e2e with the
same words in its name.
"""

from __future__ import annotations

import pytest
from core_sinks import RecordingSink

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import NotAllowed
from magnetar.core.names import TopicName
from magnetar.core.policies import AppliedPolicies, Policies, TopicPolicies
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry


def new_topic(name: str = "t", max_entries_per_ledger: int = 50_000) -> Topic:
    ledger = MemoryLedger(name, config=LedgerConfig(max_entries_per_ledger=max_entries_per_ledger))
    return Topic(TopicName.parse(name), ledger, BrokerConfig())


def publish(topic: Topic, count: int = 1, **metadata: object) -> list[Position]:
    """Append and persist ``count`` entries, one persist each (as sync sends arrive)."""
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    positions = []
    for i in range(count):
        meta = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1, **metadata)  # type: ignore[arg-type]
        pos = append_entry(topic, producer, i, i, 1, make_entry(meta, b"x"), 0)
        topic.on_persisted(pos, 0)
        positions.append(pos)
    return positions


def join(topic: Topic, name: str, sub_type: str, sub: str = "s", permits: int = 1000,
         priority: int = 0, **options: object) -> tuple[Consumer, RecordingSink]:
    sink = RecordingSink()
    consumer = Consumer(0, name, sink, sub_type=sub_type, priority_level=priority)  # type: ignore[arg-type]
    subscription = topic.subscribe(sub, consumer, 0, **options)  # type: ignore[arg-type]
    subscription.dispatcher.on_flow(consumer, permits, 0)
    return consumer, sink


def test_shared_round_robin_alternates_when_entries_arrive_one_by_one() -> None:
    topic = new_topic()
    _, first = join(topic, "a", "Shared")
    _, second = join(topic, "b", "Shared")
    sent = publish(topic, 6)
    assert first.messages == sent[0::2]
    assert second.messages == sent[1::2]


def test_failover_active_consumer_is_first_by_priority_then_name() -> None:
    topic = new_topic()
    consumers = {name: join(topic, name, "Failover", priority=priority)
                 for name, priority in [("c", 0), ("a", 1), ("b", 0)]}
    sent = publish(topic, 2)
    assert consumers["b"][1].messages == sent
    assert consumers["a"][1].messages == consumers["c"][1].messages == []


def test_nack_of_a_chunked_message_redelivers_every_chunk() -> None:
    topic = new_topic()
    consumer, sink = join(topic, "a", "Shared")
    other = publish(topic, 1)
    chunks = [publish(topic, 1, uuid="p-0", chunk_id=i, num_chunks_from_msg=3, total_chunk_msg_size=3)[0]
              for i in range(3)]
    assert sink.messages == other + chunks
    sub = topic.subscriptions["s"]
    sub.redeliver(consumer, [chunks[-1]], 0)  # the C++ client names only the last chunk
    assert sink.messages[4:] == chunks
    assert all(sub.redelivery_counts[pos] == 1 for pos in chunks)
    assert other[0] in consumer.pending and other[0] not in sub.redelivery_counts


@pytest.mark.parametrize("cumulative", [True, False])
def test_ack_beyond_the_last_entry_is_refused(cumulative: bool) -> None:
    topic = new_topic()
    consumer, sink = join(topic, "a", "Exclusive")
    (last,) = publish(topic, 1)
    sub = topic.subscriptions["s"]
    with pytest.raises(NotAllowed, match="Cannot acknowledge"):
        sub.acknowledge(consumer, cumulative, [(Position(last.ledger_id + 5, 0), None)], 0)
    assert sub.cursor.mark_delete == BEFORE_START and not sub.cursor.individually_deleted
    (after,) = publish(topic, 1)
    assert sink.messages == [last, after]


def test_start_beyond_the_end_reads_what_is_published_next() -> None:
    topic = new_topic()
    (last,) = publish(topic, 1)
    assert topic.position_before(Position(last.ledger_id + 9, 4)) == last
    assert topic.position_before(Position(last.ledger_id, last.entry_id)) == Position(last.ledger_id, -1)
    empty = new_topic("empty")
    assert empty.position_before(Position(3, 3)) == BEFORE_START


def test_non_persistent_topic_keeps_nothing_for_later() -> None:
    topic = new_topic("non-persistent://public/default/np", max_entries_per_ledger=2)
    _, ready = join(topic, "ready", "Exclusive", sub="ready")
    _, starved = join(topic, "starved", "Exclusive", sub="starved", permits=1)
    sent = publish(topic, 6)
    assert ready.messages == sent
    assert starved.messages == sent[:1]  # no permits when the others arrived: dropped
    _, late = join(topic, "late", "Exclusive", sub="late", initial_earliest=True)
    assert late.messages == []
    topic.subscriptions["starved"].dispatcher.on_flow(topic.subscriptions["starved"].consumers[0], 10, 0)
    assert starved.messages == sent[:1]
    assert topic.ledger.first_position() is not None and topic.ledger.first_position() >= sent[-2]


def test_a_consumer_held_by_the_unacked_limit_takes_messages_once_a_policy_lifts_it() -> None:
    config = BrokerConfig(maxUnackedMessagesPerConsumer=2)
    topic = Topic(TopicName.parse("persistent://public/default/lift"), MemoryLedger("lift"), config)
    sink = RecordingSink()
    consumer = Consumer(1, "c", sink, sub_type="Shared", permits=100)  # type: ignore[arg-type]
    topic.subscribe("s", consumer, 0, initial_earliest=True)
    producer = Producer(0, "p", sink)  # type: ignore[arg-type]
    for i in range(5):
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1), b"x")
        topic.on_persisted(append_entry(topic, producer, i, i, 1, entry, 0), 0)
    assert len(sink.messages) == 2 and consumer.blocked_on_unacked
    topic.apply_policies(AppliedPolicies.resolve(TopicPolicies(maxUnackedMessagesOnConsumer=0), Policies(), config),
                         1)
    assert len(sink.messages) == 5 and not consumer.blocked_on_unacked
