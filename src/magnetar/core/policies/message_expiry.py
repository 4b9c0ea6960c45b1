"""Message TTL: acknowledging what was published too long ago (Pulsar's
``PersistentMessageExpiryMonitor``).

As in Pulsar 4.x, a closed ledger has expired as a whole once it closed more than the TTL
ago, whatever its entries say (a producer's clock may be wrong); past those, an entry has
expired when ``now > publish time + TTL``: the entry's publish time, so a batch expires as
a whole and a delayed message by when it was published, not when it is due. Pulsar finds
the newest expired entry after a subscription's mark-delete position assuming publish
times grow along the topic, then moves the mark-delete position there; so does
:func:`newest_expired`, with one read of a ledger's last entry and a binary search inside
the ledger where expiry stops, so a check costs a few reads whatever the backlog.
"""

from __future__ import annotations

from magnetar.core.positions import Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.subscriptions.subscription_view import TopicView


def newest_expired(topic: TopicView, after: Position, cutoff_ms: int) -> Position | None:
    """The newest readable entry after ``after`` published before ``cutoff_ms``, or None."""
    last = topic.last_readable()
    first = topic.next_position(after)
    if last is None or first > last:
        return None
    newest: Position | None = None
    ledgers = topic.ledger.ledgers()
    for index, info in enumerate(ledgers):
        if info.ledger_id < first.ledger_id or info.ledger_id > last.ledger_id:
            continue
        low = first.entry_id if info.ledger_id == first.ledger_id else 0
        high = min(info.entries - 1, last.entry_id) if info.ledger_id == last.ledger_id else info.entries - 1
        if high < low:
            continue
        # a ledger closes when the next one opens: its close time is the next one's creation
        closed_before = index + 1 < len(ledgers) and ledgers[index + 1].timestamp_ms < cutoff_ms
        if closed_before or _published_before(topic, Position(info.ledger_id, high), cutoff_ms):
            newest = Position(info.ledger_id, high)
            continue
        found = _last_expired_in(topic, info.ledger_id, low, high - 1, cutoff_ms)
        return found if found is not None else newest
    return newest


def _last_expired_in(topic: TopicView, ledger_id: int, low: int, high: int, cutoff_ms: int) -> Position | None:
    found = None
    while low <= high:
        middle = (low + high) // 2
        if _published_before(topic, Position(ledger_id, middle), cutoff_ms):
            found = Position(ledger_id, middle)
            low = middle + 1
        else:
            high = middle - 1
    return found


def _published_before(topic: TopicView, pos: Position, cutoff_ms: int) -> bool:
    return topic.read_entry_info(pos)[1].publish_time_ms < cutoff_ms


def expire(sub: Subscription, ttl_s: int, now_ms: int) -> int:
    """Acknowledge every entry of ``sub`` published more than ``ttl_s`` seconds before
    ``now_ms``; how many entries that took off its backlog (Pulsar counts expired messages
    so; they go to the subscription's stats)."""
    target = newest_expired(sub.topic, sub.cursor.mark_delete, now_ms - ttl_s * 1000)
    if target is None:
        return 0
    before = sub.backlog()
    sub.cursor.ack_cumulative(target)
    expired = before - sub.backlog()
    if expired > 0:
        sub.expired.add(now_ms, expired)
    return expired
