"""Producer deduplication in the broker shell: policy, recovery, judging sends, snapshots.

The state machine lives in core/dedup (sans-IO); this module feeds it what it needs
from storage: the snapshot kept in the properties of the topic's ``pulsar.dedup``
cursor, the entries written after that snapshot (replayed at load, before any
producer is accepted), and each send's first and last sequence ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.message_deduplication import DedupOutcome, MessageDeduplication
from magnetar.core.entry import EntryInfo
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topic import Topic
from magnetar.storage.metadata_store import CursorRecord
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import last_sequence_id as batch_last_sequence_id
from magnetar.wire.frames import parse_entry

if TYPE_CHECKING:
    from magnetar.server.broker import BrokerService

DEDUP_CURSOR = "pulsar.dedup"


def dedup_config(broker: BrokerService) -> DeduplicationConfig:
    c = broker.config
    return DeduplicationConfig(
        entries_interval=c.brokerDeduplicationEntriesInterval,
        snapshot_interval_s=c.brokerDeduplicationSnapshotIntervalSeconds,
        max_number_of_producers=c.brokerDeduplicationMaxNumberOfProducers,
        producer_inactivity_timeout_minutes=c.brokerDeduplicationProducerInactivityTimeoutMinutes)


def dedup_enabled(broker: BrokerService, topic: Topic) -> bool:
    """Topic policy over namespace policy over ``brokerDeduplicationEnabled``."""
    if not topic.name.persistent:
        return False
    props = broker.metadata.get_topic(str(topic.name)) or {}
    if isinstance(props.get("deduplicationEnabled"), bool):
        return bool(props["deduplicationEnabled"])
    policies = broker.metadata.get_namespace_policies(topic.name.namespace_name) or {}
    if isinstance(policies.get("deduplicationEnabled"), bool):
        return bool(policies["deduplicationEnabled"])
    return broker.config.brokerDeduplicationEnabled


def last_sequence_id(metadata: pb.MessageMetadata, entry: bytes, sequence_id: int) -> int:
    """The id a send is judged by: highest_sequence_id if given, else the batch's last message."""
    if metadata.HasField("highest_sequence_id") and metadata.highest_sequence_id > sequence_id:
        return int(metadata.highest_sequence_id)
    if metadata.HasField("num_messages_in_batch"):
        return batch_last_sequence_id(metadata, parse_entry(entry).payload)
    return sequence_id


def is_last_chunk(metadata: pb.MessageMetadata) -> bool:
    if not metadata.HasField("num_chunks_from_msg"):
        return True
    return metadata.chunk_id == metadata.num_chunks_from_msg - 1


def refresh(broker: BrokerService, topic: Topic, now_ms: int) -> None:
    """Apply the effective policy: enable (and recover) or disable at run time."""
    enabled = dedup_enabled(broker, topic)
    if enabled and topic.dedup is None:
        dedup = MessageDeduplication(dedup_config(broker))
        dedup.set_enabled(True)
        recover(broker, topic, dedup, now_ms)
        topic.dedup = dedup
    elif not enabled and topic.dedup is not None:
        topic.dedup = None
        broker.metadata.delete_cursor(str(topic.name), DEDUP_CURSOR)


def recover(broker: BrokerService, topic: Topic, dedup: MessageDeduplication, now_ms: int) -> None:
    """Load the snapshot and replay every entry after it; producers wait until this ends."""
    record = broker.metadata.get_cursor(str(topic.name), DEDUP_CURSOR)
    start = record.mark_delete if record is not None else BEFORE_START
    props = {k: int(v) for k, v in (record.properties if record else {}).items()}
    dedup.begin_recovery(props, start if record is not None else None)
    try:
        last = topic.ledger.last_position()
        pos = start
        while last is not None and pos < last:
            pos = topic.ledger.next_position(pos)
            if pos > last:
                break
            entry = topic.ledger.read(pos)
            metadata = EntryInfo.read(entry).metadata
            dedup.replay_entry(metadata.producer_name, last_sequence_id(metadata, entry, metadata.sequence_id),
                               pos, is_last_chunk=is_last_chunk(metadata))
    except Exception:
        dedup.fail_recovery()
        raise
    dedup.finish_recovery(now_ms)


def judge(topic: Topic, producer_name: str, sequence_id: int, entry: bytes,
          now_ms: int) -> tuple[DedupOutcome, int]:
    """The verdict on a send and the sequence id it was judged by."""
    dedup = topic.dedup
    if dedup is None:
        return DedupOutcome.NOT_DUP, sequence_id
    metadata = EntryInfo.read(entry).metadata
    last = last_sequence_id(metadata, entry, sequence_id)
    # A batch is judged by its last id (the rule for clients that never send
    # highest_sequence_id): one whose tail is new is stored whole rather than refused,
    # since a client resending the same batch would otherwise be refused forever.
    outcome = dedup.check(producer_name, sequence_id, last, now_ms, is_last_chunk=is_last_chunk(metadata),
                          store_partial=True)
    if outcome is DedupOutcome.PARTIAL_DUP:
        outcome = DedupOutcome.NOT_DUP
    return outcome, last


def store_snapshots(broker: BrokerService, now_ms: int) -> None:
    """Write due snapshots into the dedup cursor's properties; purge inactive producers."""
    for topic in list(broker.topics.values()):
        dedup = topic.dedup
        if dedup is None:
            continue
        dedup.purge_inactive_producers(now_ms, set(topic.producers))
        snapshot = dedup.maybe_snapshot(now_ms)
        if snapshot is None:
            continue
        try:
            broker.metadata.put_cursor(str(topic.name), DEDUP_CURSOR, CursorRecord(
                mark_delete=snapshot.position, properties=dict(snapshot.properties), last_active_ms=now_ms))
        except Exception:
            dedup.on_snapshot_failed(snapshot)
            raise
        dedup.on_snapshot_stored(snapshot, now_ms)
        topic.dedup_snapshot_position = snapshot.position


def snapshot_position(topic: Topic) -> Position | None:
    return getattr(topic, "dedup_snapshot_position", None)
