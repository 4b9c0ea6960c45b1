"""Producer deduplication in the broker shell: the snapshots' reads and writes.

The state machine and its rules live in core/dedup (sans-IO: what to recover, which
snapshots are due, :mod:`magnetar.core.dedup.topic_dedup`); this module reads the
snapshot kept in the properties of the topic's ``pulsar.dedup`` cursor, deletes that
cursor, and writes the due snapshots.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from magnetar.core.dedup.due_snapshots import DueSnapshot, due_snapshots
from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR, dedup_enabled
from magnetar.core.dedup.topic_dedup import refresh as refresh_policy
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic
from magnetar.server.topic_opening import StoredTopic
from magnetar.storage.metadata_calls import metadata_call, shared_store

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.dedup")


def refresh(broker: BrokerShell, topic: Topic, now_ms: int, stored: StoredTopic | None = None) -> bool:
    """Apply the effective policy (:func:`magnetar.core.dedup.topic_dedup.refresh`): the
    stored snapshot is read when it is enabled (a loading topic's from ``stored``), the
    cursor deleted when it is disabled. True when it is to be enabled on a loaded topic of a
    shared store: its snapshot is then read off the event loop (:func:`enable_from_store`)."""
    key = str(topic.name)
    if stored is None and topic.dedup is None and shared_store(broker) and dedup_enabled(broker.policies, topic):
        return True
    snapshot = (lambda: stored.dedup_snapshot) if stored is not None \
        else (lambda: broker.metadata.get_cursor(key, DEDUP_CURSOR))
    _apply(broker, topic, now_ms, snapshot)
    return False


async def enable_from_store(broker: BrokerShell, topic: Topic, now_ms: int) -> None:
    """Deduplication turned on for a loaded topic: its snapshot read on the metadata writer's
    thread, then applied (if the topic is still loaded and still wants it)."""
    key = str(topic.name)
    record = await metadata_call(broker, lambda store: store.get_cursor(key, DEDUP_CURSOR))
    if broker.topics.get(key) is topic:
        _apply(broker, topic, now_ms, lambda: record)


def _apply(broker: BrokerShell, topic: Topic, now_ms: int, snapshot: Callable[[], CursorRecord | None]) -> None:
    if refresh_policy(topic, broker.policies, broker.config, snapshot, now_ms):
        broker.writer.delete_cursor(str(topic.name), DEDUP_CURSOR)


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
