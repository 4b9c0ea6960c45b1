"""The ``__compaction`` cursor, as Pulsar's compactor keeps it: its position is the horizon
of the last compaction, its ``CompactedTopicLedger`` property names the view that covers
it. Which view a loading topic serves, where the next compaction starts reading, and how
the cursor names a new view (or the previous one again when that could not be stored)
are decided here; the shell writes the files and the cursor record.
"""

from __future__ import annotations

from magnetar.core.compaction.compacted_topic import COMPACTED_TOPIC_LEDGER_PROPERTY, COMPACTION_SUBSCRIPTION
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic

#: the cursor's position and the view it named, to name them again
Named = tuple[Position, int | str | None]


def compaction_subscription(topic: Topic) -> Subscription | None:
    return topic.subscriptions.get(COMPACTION_SUBSCRIPTION)


def ensure_subscription(topic: Topic) -> Subscription:
    """The topic's ``__compaction`` subscription, made at the start of its backlog on the first compaction."""
    return compaction_subscription(topic) or topic.create_subscription(
        COMPACTION_SUBSCRIPTION, "Exclusive", durable=True, mark_delete=BEFORE_START)


def named_ledger(sub: Subscription | None) -> int | None:
    """The ledger id of the view the cursor names; None when it names none (or nothing readable)."""
    if sub is None:
        return None
    value = sub.cursor.properties.get(COMPACTED_TOPIC_LEDGER_PROPERTY)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def scan_start(sub: Subscription, has_view: bool) -> Position:
    """Where the next compaction reads the topic from: after the horizon of the view it
    builds on, from the start without one."""
    return sub.cursor.mark_delete if has_view else BEFORE_START


def name_view(sub: Subscription, ledger_id: int, horizon: Position) -> Named:
    """Move the cursor to ``horizon`` naming the new view; what it named before."""
    cursor = sub.cursor
    previous = (cursor.mark_delete, cursor.properties.get(COMPACTED_TOPIC_LEDGER_PROPERTY))
    cursor.properties[COMPACTED_TOPIC_LEDGER_PROPERTY] = ledger_id
    cursor.reset(horizon)
    return previous


def put_back(sub: Subscription, previous: Named) -> None:
    """The cursor write failed: the cursor names the previous view again."""
    mark_delete, ledger_id = previous
    cursor = sub.cursor
    if ledger_id is None:
        cursor.properties.pop(COMPACTED_TOPIC_LEDGER_PROPERTY, None)
    else:
        cursor.properties[COMPACTED_TOPIC_LEDGER_PROPERTY] = ledger_id
    cursor.reset(mark_delete)
