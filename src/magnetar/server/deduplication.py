"""Producer deduplication in the broker shell: policy, recovery, judging sends, snapshots.

The state machine lives in core/dedup (sans-IO); this module feeds it what it needs
from storage: the snapshot kept in the properties of the topic's ``pulsar.dedup``
cursor, the entries written after that snapshot (replayed at load, before any
producer is accepted), and each send's first and last sequence ids.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from magnetar.core.dedup.dedup_snapshot import DedupSnapshot
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.due_snapshots import due_snapshots
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.policies import deduplication_enabled
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.publish import is_last_chunk, last_sequence_id, stored_metadata
from magnetar.core.topics.topic import Topic

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

DEDUP_CURSOR = "pulsar.dedup"
log = logging.getLogger("magnetar.dedup")


def dedup_config(broker: BrokerShell) -> DeduplicationConfig:
    c = broker.config
    return DeduplicationConfig(
        entries_interval=c.brokerDeduplicationEntriesInterval,
        snapshot_interval_s=c.brokerDeduplicationSnapshotIntervalSeconds,
        max_number_of_producers=c.brokerDeduplicationMaxNumberOfProducers,
        producer_inactivity_timeout_minutes=c.brokerDeduplicationProducerInactivityTimeoutMinutes)


def dedup_enabled(broker: BrokerShell, topic: Topic) -> bool:
    """Topic policy over namespace policy over ``brokerDeduplicationEnabled``."""
    if not topic.name.persistent:
        return False
    return broker.policies.resolve(deduplication_enabled, topic.name)


def refresh(broker: BrokerShell, topic: Topic, now_ms: int) -> None:
    """Apply the effective policy: enable (and recover) or disable at run time."""
    enabled = dedup_enabled(broker, topic)
    if enabled and topic.dedup is None:
        dedup = MessageDeduplication(dedup_config(broker))
        dedup.set_enabled(True)
        recover(broker, topic, dedup, now_ms)
        topic.dedup = dedup
    elif not enabled and topic.dedup is not None:
        topic.dedup = None
        broker.writer.delete_cursor(str(topic.name), DEDUP_CURSOR)


def recover(broker: BrokerShell, topic: Topic, dedup: MessageDeduplication, now_ms: int) -> None:
    """Load the snapshot and replay every entry after it; producers wait until this ends."""
    record = broker.metadata.get_cursor(str(topic.name), DEDUP_CURSOR)
    start = record.mark_delete if record is not None else BEFORE_START
    props = {k: int(v) for k, v in (record.properties if record else {}).items()}
    dedup.begin_recovery(props, start if record is not None else None)
    try:
        replay(topic, dedup, start)
    except Exception:
        dedup.fail_recovery()
        raise
    dedup.finish_recovery(now_ms)


def replay(topic: Topic, dedup: MessageDeduplication, after: Position) -> int:
    """Feed every entry after ``after`` to the recovering ``dedup``; returns how many.

    Only the producer name and the sequence ids of each entry matter, and replay only
    raises ids, so the entries are folded into one highest id per producer and handed
    over in one call. Payloads are never read: the ids come from each entry's metadata.
    """
    highest: dict[str, int] = {}
    count = 0
    pos = after
    for pos, entry in topic.ledger.iter_entries(after):  # noqa: B007 - the last one is used below
        count += 1
        metadata = stored_metadata(entry)
        if metadata.num_chunks_from_msg > 0 and not is_last_chunk(metadata):
            continue
        last = last_sequence_id(metadata)
        name = metadata.producer_name
        if last > highest.get(name, -1):
            highest[name] = last
    dedup.replay_entries(highest, count, pos)
    return count


def store_snapshots(broker: BrokerShell, now_ms: int) -> None:
    """Write due snapshots into the dedup cursor's properties; purge inactive producers."""
    for topic, dedup, snapshot, record in due_snapshots(broker.core.deduplicating_topics(), now_ms):
        written = broker.writer.put_cursors([(str(topic.name), DEDUP_CURSOR, record)])
        broker.cursors.on_loop(written, partial(_snapshot_written, topic, dedup, snapshot, now_ms))


def _snapshot_written(topic: Topic, dedup: MessageDeduplication, snapshot: DedupSnapshot, now_ms: int,
                      error: BaseException | None) -> None:
    if error is not None:
        log.error("storing the deduplication snapshot of %s failed", topic.name, exc_info=error)
        dedup.on_snapshot_failed(snapshot)
        return
    dedup.on_snapshot_stored(snapshot, now_ms)
    if topic.dedup is dedup:
        topic.dedup_snapshot_position = snapshot.position


def snapshot_position(topic: Topic) -> Position | None:
    return topic.dedup_snapshot_position
