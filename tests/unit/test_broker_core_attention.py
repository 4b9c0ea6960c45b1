"""The once-a-second ticks visit the topics that need them, not every loaded topic: the
persist tick those whose cursors changed, the delayed tick those with delayed trackers."""

from __future__ import annotations

from core_sinks import RecordingSink

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.delayed.delayed_delivery import DelayedDelivery
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.topic import Topic
from magnetar.storage.memory_ledger import MemoryLedger


def adopted(core: BrokerCore, name: str) -> Topic:
    key = f"persistent://public/default/{name}"
    topic = Topic(TopicName.parse(key), MemoryLedger(key), core.config)
    core.adopt(topic)
    return topic


def test_only_topics_whose_cursors_changed_are_written_once() -> None:
    core = BrokerCore(BrokerConfig())
    quiet, busy = adopted(core, "quiet"), adopted(core, "busy")
    quiet.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    sub = busy.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    core.cursor_writes()
    sub.cursor.reset(Position(0, 5))
    assert [w.topic for w in core.cursor_writes()] == [str(busy.name)]
    assert core.cursor_writes() == [], "written: not written again until it changes"
    sub.cursor.reset(Position(0, 6))
    assert len(core.cursor_writes(force=True)) == 2, "force writes every durable cursor"


def test_a_failed_write_is_written_again() -> None:
    core = BrokerCore(BrokerConfig())
    topic = adopted(core, "t")
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    core.cursor_writes()
    sub.cursor.reset(Position(0, 3))
    writes = core.cursor_writes()
    core.cursor_write_failed(writes)
    assert [w.subscription for w in core.cursor_writes()] == [sub]


def test_an_unloaded_topic_is_neither_written_nor_ticked() -> None:
    core = BrokerCore(BrokerConfig())
    topic = adopted(core, "t")
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    core.cursor_writes()
    topic.delayed = DelayedDelivery(core.config)
    topic.delayed.tracker_for(sub)
    sub.cursor.reset(Position(0, 3))
    del core.topics[str(topic.name)]
    assert core.cursor_writes() == []
    assert core.tick_delayed_delivery(0) is None


def test_the_delayed_tick_learns_of_a_topic_when_its_first_tracker_is_made() -> None:
    core = BrokerCore(BrokerConfig())
    topic = adopted(core, "t")
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=BEFORE_START)
    topic.delayed = DelayedDelivery(core.config)
    assert topic.delayed is not None and not topic.delayed.has_trackers
    consumer = Consumer(1, "c", RecordingSink(), sub_type="Shared")
    sub.add_consumer(consumer, 0)
    consumer.permits = 10
    assert core.tick_delayed_delivery(0) is None
    tracker = topic.delayed.tracker_for(sub)
    tracker.add_message(0, 0, 5_000, 0)
    due = core.tick_delayed_delivery(0)
    assert due is not None and due == tracker.next_delivery_time_ms()


def test_deduplicating_topics_are_those_with_dedup_or_a_business_id_window() -> None:
    core = BrokerCore(BrokerConfig())
    plain, by_sequence, by_property = adopted(core, "plain"), adopted(core, "seq"), adopted(core, "prop")
    by_sequence.dedup = MessageDeduplication()
    by_property.property_dedup = PropertyDedupWindow(60_000, 100)
    assert set(core.deduplicating_topics()) == {by_sequence, by_property}
    by_sequence.dedup = None
    del core.topics[str(by_property.name)]
    assert core.deduplicating_topics() == []
    assert plain.dedup is None
