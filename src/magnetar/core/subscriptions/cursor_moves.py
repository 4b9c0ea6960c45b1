"""Moving a subscription's cursor on request: seek by id or time, skip, expire, and the
last message id a reader compares against.

Pulsar's ``PersistentSubscription.resetCursor``/``skipMessages`` (expiry is
:mod:`magnetar.core.policies.message_expiry`) and
``PersistentTopic.getLastMessageId``, as functions of a topic and the time. The client
protocol (SEEK, GET_LAST_MESSAGE_ID, a subscribe with a rollback duration), the admin
API and the simulation all call these, so a cursor moves the same way whoever asks.
"""

from __future__ import annotations

from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.subscriptions.subscription_view import EntrySource, TopicView


def position_before_time(topic: TopicView, timestamp_ms: int) -> Position:
    """The mark-delete position whose next entry is the first published at or after the time."""
    last = topic.last_readable()
    previous = BEFORE_START
    pos = topic.ledger.first_position()
    while pos is not None and last is not None and pos <= last:
        if topic.read_entry_info(pos)[1].publish_time_ms >= timestamp_ms:
            return previous if previous != BEFORE_START else topic.position_before(pos)
        previous = pos
        pos = topic.next_position(pos)
    return last if last is not None else BEFORE_START


def reset_cursor_by_time(sub: Subscription, timestamp_ms: int, now_ms: int) -> None:
    sub.reset_cursor(position_before_time(sub.topic, timestamp_ms), now_ms)


def skip_messages(sub: Subscription, count: int) -> int:
    """Acknowledge the next ``count`` unacknowledged entries; how many were skipped."""
    last = sub.topic.last_readable()
    pos = sub.cursor.mark_delete
    skipped = 0
    while skipped < count and last is not None and pos < last:
        pos = sub.topic.next_position(pos)
        if pos > last:
            break
        if not sub.cursor.is_acked(pos):
            sub.cursor.ack(pos)
            skipped += 1
    return skipped


def last_message_id(topic: EntrySource) -> tuple[Position, int]:
    """The last readable entry and its last batch index (-1 when not a batch)."""
    last = topic.last_readable()
    if last is None:
        return Position(-1, -1), -1
    try:
        info = topic.read_entry_info(last)[1]
    except KeyError:
        # every subscription consumed it and its ledger was trimmed: the id still stands
        return last, -1
    batch = info.num_messages - 1 if info.metadata.HasField("num_messages_in_batch") else -1
    return last, batch
