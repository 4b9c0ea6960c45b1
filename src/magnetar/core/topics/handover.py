"""A topic about to move to another broker lets its consumers finish what they hold first.

When a broker closes a topic's consumers, the client keeps the messages already in its
receiver queue until it has subscribed again on the next owner, and the application goes on
taking them; their acknowledgements, sent to a connection that is gone, are lost. The next
owner redelivers them, meanwhile handing later messages of the same keys to whichever
consumer holds those keys now: a Key_Shared key can then be processed out of order, and
every such message is processed twice. So before a planned move (a bundle unloaded or
handed over, a broker stopping) the owner stops delivering to the topic's consumers, and
closes them only once they have acknowledged everything they were sent, or a deadline
passes. Producers keep publishing meanwhile; nothing they send waits on this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.topic import Topic

#: how often the drain looks again while consumers still hold messages
CHECK_EVERY_MS = 10


def consumers_of(topic: Topic) -> Iterator[Consumer]:
    for sub in topic.subscriptions.values():
        yield from sub.consumers


def held_messages(topic: Topic) -> int:
    """Messages delivered to the topic's consumers and not yet acknowledged."""
    return sum(consumer.unacked_messages for consumer in consumers_of(topic))


class DeliveryDrain:
    """Holds back deliveries to ``topic``'s consumers until they hold nothing unacknowledged
    or ``deadline_ms`` passes; then ``done`` is told which (True: drained)."""

    def __init__(self, topic: Topic, timers: BrokerTimers, deadline_ms: int, done: Callable[[bool], None]) -> None:
        self.topic = topic
        self.timers = timers
        self.deadline_ms = deadline_ms
        self.done = done
        self.finished = False

    def start(self, now_ms: int) -> None:
        self.topic.handing_over = True  # consumers that join from now on are held too
        for consumer in consumers_of(self.topic):
            consumer.handed_over = True
        self.on_timer(now_ms)

    def on_timer(self, now_ms: int) -> None:
        if self.finished:
            return
        if held_messages(self.topic) == 0 or now_ms >= self.deadline_ms:
            self.finished = True
            self.done(held_messages(self.topic) == 0)
            return
        self.timers.wake_up(self, min(now_ms + CHECK_EVERY_MS, self.deadline_ms))
