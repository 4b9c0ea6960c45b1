"""The topic-level record of a shared delayed-message index (``delayedDeliverySharedIndexEnabled``).

The shared index's bucket snapshots are listed in the properties of a cursor that is no
subscription (``SHARED_INDEX_CURSOR``), as PIP-195 proposes. It is written with the
subscriptions' cursors when its list changed, read back when the topic opens, and
dropped (after its snapshots) when the switch is off, since the per-subscription
trackers then rebuild their own indexes by re-reading. The shell writes what this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.core.delayed.bucket_delayed_delivery_tracker import clean_residual_snapshots
from magnetar.core.positions import BEFORE_START
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic


@dataclass(frozen=True)
class RecordChange:
    """The record to write, or None: delete it."""

    record: CursorRecord | None


def record_change(topic: Topic, now_ms: int, force: bool = False) -> RecordChange | None:
    """What to write when the index's bucket list changed since it was last written (the
    version is taken as written); None when nothing changed or there is no shared index."""
    index = topic.delayed.shared_index if topic.delayed is not None else None
    if index is None or not topic.name.persistent:
        return None
    if index.persisted_version == index.version and not force:
        return None
    index.persisted_version = index.version
    if not index.properties:
        return RecordChange(None)
    marks = [s.cursor.mark_delete for s in topic.subscriptions.values() if s.durable]
    return RecordChange(CursorRecord(mark_delete=min(marks) if marks else BEFORE_START,
                                     properties=dict(index.properties), last_active_ms=now_ms))


def recover(topic: Topic, record: CursorRecord, now_ms: int) -> int | None:
    """Rebuild the topic's shared index from its record: the messages it holds, or None
    when the topic does not share its index (any more): its snapshots are deleted, and
    the shell deletes the record."""
    delayed = topic.delayed
    if delayed is None or not delayed.shared:
        if delayed is not None and delayed.storage is not None:
            clean_residual_snapshots(record.properties, delayed.storage)
        return None
    return delayed.recover_shared(topic, dict(record.properties), now_ms)
