"""Dispatch rate limits on the real dispatchers: a subscription sends its bucket's worth,
waits for the broker's timer, then goes on; nothing is lost or reordered."""

from __future__ import annotations

import pytest
from test_core_dispatch import join, new_topic, publish

from magnetar.core.dispatchers.dispatch_throttle import DispatchThrottle
from magnetar.core.policies.rate_limit import RateLimiter


class Alarms:
    def __init__(self) -> None:
        self.set: list[tuple[DispatchThrottle, int]] = []

    def __call__(self, owner: DispatchThrottle, at_ms: int) -> None:
        self.set.append((owner, at_ms))


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover", "Shared", "Key_Shared"])
def test_a_subscription_sends_its_rate_then_waits_for_the_timer(sub_type: str) -> None:
    topic = new_topic()
    consumer, sink = join(topic, "c", sub_type)
    alarms = Alarms()
    sub = topic.subscriptions["s"]
    sub.dispatcher.throttle = DispatchThrottle(sub.dispatcher, RateLimiter(0, 0), RateLimiter(10, 0), alarms)
    sent = publish(topic, 25)
    assert len(sink.messages) == 11, "the bucket's second of 10, and the send that found it empty"
    assert consumer.rate_paused and len(alarms.set) == 1
    owner, at = alarms.set.pop()
    assert at == 100, "one message short at 10/s: 100 ms"
    owner.on_timer(at)
    assert len(sink.messages) == 12 and consumer.rate_paused
    now = at
    while alarms.set:
        owner, now = alarms.set.pop()
        owner.on_timer(now)
    assert sink.messages == sent, "everything, in order, once"
    assert now >= 1400, "25 messages at 10/s with a second's burst take at least 1.4 s"


def test_the_topic_bucket_is_shared_by_its_subscriptions() -> None:
    topic = new_topic()
    _, first = join(topic, "a", "Exclusive", sub="one")
    _, second = join(topic, "b", "Exclusive", sub="two")
    shared, alarms = RateLimiter(10, 0), Alarms()
    for sub in topic.subscriptions.values():
        sub.dispatcher.throttle = DispatchThrottle(sub.dispatcher, shared, RateLimiter(0, 0), alarms)
    publish(topic, 20)
    assert len(first.messages) + len(second.messages) <= 12


def test_releasing_a_throttle_frees_its_consumers() -> None:
    topic = new_topic()
    consumer, _ = join(topic, "c", "Exclusive")
    sub = topic.subscriptions["s"]
    throttle = DispatchThrottle(sub.dispatcher, RateLimiter(0, 0), RateLimiter(1, 0), Alarms())
    sub.dispatcher.throttle = throttle
    publish(topic, 3)
    assert consumer.rate_paused
    throttle.release()
    assert not consumer.rate_paused
