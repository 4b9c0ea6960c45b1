"""A topic's producer deduplication as its policies want it: when it is on, and how it is
recovered when it starts (the snapshot kept in the properties of the topic's
``pulsar.dedup`` cursor, then every entry written after that snapshot, replayed before any
producer is accepted).

The shell reads the stored snapshot and deletes the cursor; what to recover from, and
when, is decided here.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.policies import deduplication_enabled
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.publish import is_last_chunk, last_sequence_id, stored_metadata
from magnetar.core.topics.topic import Topic

#: the cursor whose properties hold a topic's dedup snapshot, as Pulsar names it
DEDUP_CURSOR = "pulsar.dedup"


def dedup_config(config: BrokerConfig) -> DeduplicationConfig:
    return DeduplicationConfig(
        entries_interval=config.brokerDeduplicationEntriesInterval,
        snapshot_interval_s=config.brokerDeduplicationSnapshotIntervalSeconds,
        max_number_of_producers=config.brokerDeduplicationMaxNumberOfProducers,
        producer_inactivity_timeout_minutes=config.brokerDeduplicationProducerInactivityTimeoutMinutes)


def dedup_enabled(policies: PolicyCache, topic: Topic) -> bool:
    """Topic policy over namespace policy over ``brokerDeduplicationEnabled``."""
    if not topic.name.persistent:
        return False
    return policies.resolve(deduplication_enabled, topic.name)


def refresh(topic: Topic, policies: PolicyCache, config: BrokerConfig,
            stored: Callable[[], CursorRecord | None], now_ms: int) -> bool:
    """Apply the effective policy: enable (recovering from the snapshot ``stored`` reads)
    or disable at run time. True when it was disabled now: its cursor is to be deleted."""
    enabled = dedup_enabled(policies, topic)
    if enabled and topic.dedup is None:
        topic.dedup = recovered(topic, dedup_config(config), stored(), now_ms)
    elif not enabled and topic.dedup is not None:
        topic.dedup = None
        return True
    return False


def recovered(topic: Topic, config: DeduplicationConfig, snapshot: CursorRecord | None,
              now_ms: int) -> MessageDeduplication:
    """Deduplication as a topic load recovers it: the stored snapshot, then every entry
    after it; producers wait until this ends."""
    dedup = MessageDeduplication(config)
    dedup.set_enabled(True)
    start = snapshot.mark_delete if snapshot is not None else BEFORE_START
    props = {k: int(v) for k, v in (snapshot.properties if snapshot else {}).items()}
    dedup.begin_recovery(props, start if snapshot is not None else None)
    try:
        replay(topic, dedup, start)
    except Exception:
        dedup.fail_recovery()
        raise
    dedup.finish_recovery(now_ms)
    return dedup


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
