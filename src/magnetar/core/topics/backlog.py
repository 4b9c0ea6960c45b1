"""How big and how old a topic's backlog is: the numbers backlog quotas, stats and
metrics read (Pulsar's ``ManagedLedger.getEstimatedBacklogSize`` and PIP-323's oldest
unacknowledged message of a topic)."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.core.positions import Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic, slowest_mark_delete


def backlog_size_bytes(topic: Topic, mark_delete: Position) -> int:
    """Estimated bytes after ``mark_delete``, pro rata within the ledger it falls in."""
    total = 0
    for info in topic.ledger.ledgers():
        if info.entries <= 0 or info.ledger_id < mark_delete.ledger_id:
            continue
        if info.ledger_id > mark_delete.ledger_id:
            total += info.size_bytes
            continue
        remaining = info.entries - (mark_delete.entry_id + 1)
        if remaining > 0:
            total += info.size_bytes * remaining // info.entries
    return total


def topic_backlog_bytes(topic: Topic) -> int:
    """The backlog of the slowest durable subscription, as Pulsar's topic ``backlogSize``."""
    slowest = slowest_mark_delete(topic)
    return backlog_size_bytes(topic, slowest) if slowest is not None else 0


@dataclass(frozen=True)
class OldestBacklog:
    """The oldest unacknowledged message of a topic and the subscription holding it."""

    subscription: str
    publish_time_ms: int

    def age_s(self, now_ms: int) -> int:
        return max(0, (now_ms - self.publish_time_ms) // 1000)


def oldest_backlog(topic: Topic) -> OldestBacklog | None:
    """None when no durable subscription has a backlog (or its entry cannot be read)."""
    last = topic.last_readable()
    if last is None:
        return None
    behind = [s for s in topic.subscriptions.values() if s.durable and s.cursor.mark_delete < last]
    if not behind:
        return None
    slowest = min(behind, key=lambda s: s.cursor.mark_delete)
    first = first_unacked(slowest, last)
    if first is None:
        return None
    try:
        return OldestBacklog(slowest.name, topic.read_entry_info(first)[1].publish_time_ms)
    except (KeyError, ValueError):
        return None


def first_unacked(sub: Subscription, last: Position) -> Position | None:
    pos = sub.cursor.mark_delete
    while pos < last:
        pos = sub.topic.next_position(pos)
        if pos > last:
            return None
        if not sub.cursor.is_acked(pos):
            return pos
    return None
