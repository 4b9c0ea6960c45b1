"""Which deduplicating topics store a snapshot now, and what: the once-a-second persist
asks here, and the shell (or the simulation) writes each record into the topic's
``pulsar.dedup`` cursor, then tells the state machine it is stored (or not)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from magnetar.core.dedup.dedup_snapshot import DedupSnapshot
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic


class DueSnapshot(NamedTuple):
    topic: Topic
    dedup: MessageDeduplication
    snapshot: DedupSnapshot
    record: CursorRecord

    def stored(self, now_ms: int) -> None:
        """The record is in the store: the state machine counts from it, and the topic's
        stats show its position unless deduplication was replaced meanwhile."""
        self.dedup.on_snapshot_stored(self.snapshot, now_ms)
        if self.topic.dedup is self.dedup:
            self.topic.dedup_snapshot_position = self.snapshot.position

    def failed(self) -> None:
        self.dedup.on_snapshot_failed(self.snapshot)


def due_snapshots(topics: Iterable[Topic], now_ms: int) -> Iterator[DueSnapshot]:
    """Purge inactive producers, and the snapshots due now with the cursor record of each."""
    for topic in topics:
        dedup = topic.dedup
        if dedup is None:
            continue
        dedup.purge_inactive_producers(now_ms, set(topic.producers))
        snapshot = dedup.maybe_snapshot(now_ms)
        if snapshot is not None:
            yield DueSnapshot(topic, dedup, snapshot, CursorRecord(
                mark_delete=snapshot.position, properties=dict(snapshot.properties), last_active_ms=now_ms))
