"""A loading topic's subscriptions, from the cursors stored for it.

Every stored cursor is a durable subscription, except two that Pulsar keeps beside them:
the deduplication snapshot's (``pulsar.dedup``, whose position the topic's stats show)
and the shared delayed index's record. A restored subscription starts at its stored
mark-delete position with its acknowledged ranges, counts as written, and takes its
type from the first consumer that comes.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR
from magnetar.core.delayed.delayed_delivery import SHARED_INDEX_CURSOR
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic


def restore_subscriptions(topic: Topic, records: Mapping[str, CursorRecord]) -> None:
    for name, record in records.items():
        if name == DEDUP_CURSOR:
            topic.dedup_snapshot_position = record.mark_delete
            continue
        if name == SHARED_INDEX_CURSOR:
            continue
        sub = topic.create_subscription(name, "Exclusive", durable=True,
                                        mark_delete=record.mark_delete, properties=record.properties)
        sub.cursor.restore_ranges(record.individually_deleted)
        sub.cursor.version = 0
        sub.persisted_version = 0
