"""Producer deduplication in the broker shell: the snapshots' reads and writes.

The state machine and its rules live in core/dedup (sans-IO: what to recover, which
snapshots are due, :mod:`magnetar.core.dedup.topic_dedup`); this module reads the
snapshot kept in the properties of the topic's ``pulsar.dedup`` cursor, deletes that
cursor, and writes the due snapshots.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from magnetar.core.dedup.due_snapshots import DueSnapshot, due_snapshots
from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR
from magnetar.core.dedup.topic_dedup import refresh as refresh_policy
from magnetar.core.topics.topic import Topic
from magnetar.server.topic_opening import StoredTopic

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.dedup")


def refresh(broker: BrokerShell, topic: Topic, now_ms: int, stored: StoredTopic | None = None) -> None:
    """Apply the effective policy (:func:`magnetar.core.dedup.topic_dedup.refresh`): the
    stored snapshot is read when it is enabled (a loading topic's from ``stored``), the
    cursor deleted when it is disabled."""
    key = str(topic.name)
    snapshot = (lambda: stored.dedup_snapshot) if stored is not None \
        else (lambda: broker.metadata.get_cursor(key, DEDUP_CURSOR))
    if refresh_policy(topic, broker.policies, broker.config, snapshot, now_ms):
        broker.writer.delete_cursor(key, DEDUP_CURSOR)


def store_snapshots(broker: BrokerShell, now_ms: int) -> None:
    """Write due snapshots into the dedup cursor's properties; purge inactive producers."""
    for due in due_snapshots(broker.core.deduplicating_topics(), now_ms):
        written = broker.writer.put_cursors([(str(due.topic.name), DEDUP_CURSOR, due.record)])
        broker.cursors.on_loop(written, partial(_snapshot_written, due, now_ms))


def _snapshot_written(due: DueSnapshot, now_ms: int, error: BaseException | None) -> None:
    if error is not None:
        log.error("storing the deduplication snapshot of %s failed", due.topic.name, exc_info=error)
        due.failed()
        return
    due.stored(now_ms)
