"""A loaded topic's figures as the console's topic list shows and sorts them.

One function reads them all off a topic (``measure``), so that the broker's rate samples
(which read every loaded topic every few seconds anyway) and a page of the topic list
count the same way. A partitioned topic's figures are its partitions' summed, except its
subscriptions, which every partition holds alike (the largest count is taken).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from magnetar.core.topics.topic import Topic


class Figures(NamedTuple):
    msgRateIn: float = 0.0
    msgRateOut: float = 0.0
    msgThroughputIn: float = 0.0
    msgThroughputOut: float = 0.0
    backlog: int = 0
    storageSize: int = 0
    producers: int = 0
    subscriptions: int = 0
    consumers: int = 0


#: the figures a topic list can be sorted by, in the order of ``Figures``
FIELDS: tuple[str, ...] = Figures._fields
NONE = Figures()


class Measured(NamedTuple):
    """A topic's figures and the counters its consumers have sent (messages, bytes), ever."""

    figures: Figures
    msgs_out: int
    bytes_out: int


_new = tuple.__new__


def measure(topic: Topic, now_ms: int) -> Measured:
    rate_in, throughput_in = topic.msg_in.rate(now_ms)
    rate_out = throughput_out = 0.0
    backlog = consumers = msgs_out = bytes_out = 0
    for sub in topic.subscriptions.values():
        backlog += sub.backlog()
        for consumer in sub.consumers:
            consumers += 1
            counter = consumer.msg_out
            msgs_out += counter.total_msgs
            bytes_out += counter.total_bytes
            rate, throughput = counter.rate(now_ms)
            rate_out += rate
            throughput_out += throughput
    # tuple.__new__: a NamedTuple's own constructor costs more than the rest of a walk's turn
    figures = _new(Figures, (rate_in, rate_out, throughput_in, throughput_out, backlog,
                             topic.ledger.total_size_bytes(), len(topic.producers), len(topic.subscriptions),
                             consumers))
    return _new(Measured, (figures, msgs_out, bytes_out))


def combine(parts: Iterable[Figures]) -> Figures:
    """The figures of a partitioned topic from those of its partitions."""
    listed = list(parts)
    if not listed:
        return NONE
    return Figures(
        sum(p.msgRateIn for p in listed), sum(p.msgRateOut for p in listed),
        sum(p.msgThroughputIn for p in listed), sum(p.msgThroughputOut for p in listed),
        sum(p.backlog for p in listed), sum(p.storageSize for p in listed), sum(p.producers for p in listed),
        max(p.subscriptions for p in listed), sum(p.consumers for p in listed))
