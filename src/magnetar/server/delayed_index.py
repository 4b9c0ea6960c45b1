"""The topic-level record of a shared delayed-message index (``delayedDeliverySharedIndexEnabled``).

The shared index's bucket snapshots are listed in the properties of a cursor that is no
subscription (``SHARED_INDEX_CURSOR``), as PIP-195 proposes. It is written with the
subscriptions' cursors when its list changed, read back when the topic opens, and
dropped (after its snapshots) when the switch is off, since the per-subscription
trackers then rebuild their own indexes by re-reading.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.core.delayed.bucket_delayed_delivery_tracker import clean_residual_snapshots
from magnetar.core.delayed.delayed_delivery import SHARED_INDEX_CURSOR
from magnetar.core.positions import BEFORE_START
from magnetar.core.topics.topic import Topic
from magnetar.server.clock import now_ms
from magnetar.storage.metadata_store import CursorRecord

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.delayed")


def recover(broker: BrokerShell, topic: Topic, now: int) -> None:
    """Rebuild the topic's shared index from its record, or delete a record left from sharing."""
    if not topic.name.persistent:
        return
    record = broker.metadata.get_cursor(str(topic.name), SHARED_INDEX_CURSOR)
    if record is None:
        return
    delayed = topic.delayed
    if delayed is None or not delayed.shared:
        if delayed is not None and delayed.storage is not None:
            clean_residual_snapshots(record.properties, delayed.storage)
        broker.writer.delete_cursor(str(topic.name), SHARED_INDEX_CURSOR)
        return
    count = delayed.recover_shared(topic, dict(record.properties), now)
    log.info("%s: shared delayed index recovered with %d messages", topic.name, count)
    persist(broker, topic)


def persist(broker: BrokerShell, topic: Topic, force: bool = False) -> int:
    """Write the record if the index's bucket list changed; 1 if written or deleted."""
    index = topic.delayed.shared_index if topic.delayed is not None else None
    if index is None or not topic.name.persistent:
        return 0
    if index.persisted_version == index.version and not force:
        return 0
    name = str(topic.name)
    if index.properties:
        marks = [s.cursor.mark_delete for s in topic.subscriptions.values() if s.durable]
        broker.writer.put_cursors([(name, SHARED_INDEX_CURSOR, CursorRecord(
            mark_delete=min(marks) if marks else BEFORE_START,
            properties=dict(index.properties), last_active_ms=now_ms()))])
    else:
        broker.writer.delete_cursor(name, SHARED_INDEX_CURSOR)
    index.persisted_version = index.version
    return 1
