"""Reading and writing the record of a topic's shared delayed-message index; what to
write and how to recover are decided in :mod:`magnetar.core.delayed.shared_index_record`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.core.delayed import shared_index_record
from magnetar.core.delayed.delayed_delivery import SHARED_INDEX_CURSOR
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic
from magnetar.server.clock import now_ms

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.delayed")


def recover(broker: BrokerShell, topic: Topic, now: int, record: CursorRecord | None) -> None:
    """Rebuild the topic's shared index from its stored ``record``, or delete a record left
    from sharing."""
    if not topic.name.persistent:
        return
    if record is None:
        return
    count = shared_index_record.recover(topic, record, now)
    if count is None:
        broker.writer.delete_cursor(str(topic.name), SHARED_INDEX_CURSOR)
        return
    log.info("%s: shared delayed index recovered with %d messages", topic.name, count)
    persist(broker, topic)


def persist(broker: BrokerShell, topic: Topic, force: bool = False) -> int:
    """Write the record if the index's bucket list changed; 1 if written or deleted."""
    change = shared_index_record.record_change(topic, now_ms(), force)
    if change is None:
        return 0
    name = str(topic.name)
    if change.record is not None:
        broker.writer.put_cursors([(name, SHARED_INDEX_CURSOR, change.record)])
    else:
        broker.writer.delete_cursor(name, SHARED_INDEX_CURSOR)
    return 1
