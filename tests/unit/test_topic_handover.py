"""A topic about to move holds its deliveries until its consumers acknowledged what they
hold (core/topics/handover.py), on the broker's one timer."""

from __future__ import annotations

from test_core_dispatch import join, new_topic, publish

from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.core.topics.handover import CHECK_EVERY_MS, DeliveryDrain, held_messages


def drain_of(topic, deadline_ms: int) -> tuple[DeliveryDrain, BrokerTimers, list[bool]]:  # type: ignore[no-untyped-def]
    timers, outcome = BrokerTimers(), []
    return DeliveryDrain(topic, timers, deadline_ms, outcome.append), timers, outcome


def test_nothing_more_is_delivered_while_the_consumers_finish_what_they_hold() -> None:
    topic = new_topic()
    consumer, sink = join(topic, "a", "Key_Shared")
    first = publish(topic, 3)
    assert sink.messages == first and held_messages(topic) == 3
    drain, timers, outcome = drain_of(topic, deadline_ms=3_000)
    drain.start(0)
    publish(topic, 2)  # producers go on publishing; none of it goes out
    assert sink.messages == first and outcome == []
    sub = topic.subscriptions["s"]
    sub.acknowledge(consumer, False, [(pos, None) for pos in first], 5)
    timers.on_timer(CHECK_EVERY_MS)
    assert outcome == [True] and held_messages(topic) == 0
    assert sink.messages == first  # the rest is for the next owner


def test_a_consumer_that_does_not_acknowledge_is_waited_for_until_the_deadline() -> None:
    topic = new_topic()
    join(topic, "a", "Shared")
    publish(topic, 2)
    drain, timers, outcome = drain_of(topic, deadline_ms=25)
    drain.start(0)
    now = 0
    while not outcome:
        deadline = timers.next_deadline_ms()
        assert deadline is not None and deadline <= 25, "it never waits past the deadline"
        now = deadline
        timers.on_timer(now)
    assert outcome == [False] and now == 25 and held_messages(topic) == 2


def test_a_topic_whose_consumers_hold_nothing_is_done_at_once() -> None:
    topic = new_topic()
    join(topic, "a", "Exclusive")
    drain, timers, outcome = drain_of(topic, deadline_ms=3_000)
    drain.start(0)
    assert outcome == [True] and timers.next_deadline_ms() is None


def test_a_consumer_that_joins_during_the_drain_gets_nothing_either() -> None:
    """Found by the command simulation (seed 958): a consumer subscribing while the topic
    drains was sent messages after the drain said its consumers held nothing."""
    topic = new_topic()
    publish(topic, 2)
    drain, _, outcome = drain_of(topic, deadline_ms=3_000)
    drain.start(0)
    _, sink = join(topic, "late", "Shared")
    assert sink.messages == [] and outcome == [True]
