"""Producer deduplication in the broker shell: policy, recovery, judging sends, snapshots.

The state machine lives in core/dedup (sans-IO); this module feeds it what it needs
from storage: the snapshot kept in the properties of the topic's ``pulsar.dedup``
cursor, the entries written after that snapshot (replayed at load, before any
producer is accepted), and each send's first and last sequence ids.
"""

from __future__ import annotations

import logging
import struct
from functools import partial
from typing import TYPE_CHECKING

from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.message_deduplication import (
    NO_SEQUENCE_ID,
    DedupOutcome,
    DedupSnapshot,
    MessageDeduplication,
)
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topic import Topic
from magnetar.storage.metadata_store import CursorRecord
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import last_sequence_id as batch_last_sequence_id
from magnetar.wire.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C, parse_entry

if TYPE_CHECKING:
    from magnetar.server.broker import BrokerService

DEDUP_CURSOR = "pulsar.dedup"
log = logging.getLogger("magnetar.dedup")


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
    """False for the chunks before the last of a chunked message (they are judged by the last).

    Read from the values, not field presence: an absent ``num_chunks_from_msg`` reads
    0, and a message in 0 chunks is no chunked message either.
    """
    chunks = metadata.num_chunks_from_msg
    return chunks <= 0 or metadata.chunk_id == chunks - 1


_U32 = struct.Struct(">I")
_BROKER_ENTRY_MAGIC = MAGIC_BROKER_ENTRY_METADATA.to_bytes(2, "big")
_CRC_MAGIC = MAGIC_CRC32C.to_bytes(2, "big")
_parse_metadata = pb.MessageMetadata.FromString


def stored_metadata(entry: bytes) -> pb.MessageMetadata:
    """The MessageMetadata of an entry that passed ``peek_metadata``'s checks, with little Python work.

    Every entry passes those checks before it is stored (and a stored one its record
    checksum when read back), so only the section layout is followed here. Replay reads
    every entry since the last snapshot before the topic accepts a producer, so the
    cost per entry is restart time.
    """
    offset = 0
    if entry[:2] == _BROKER_ENTRY_MAGIC:
        offset = 6 + _U32.unpack_from(entry, 2)[0]
    if entry[offset : offset + 2] == _CRC_MAGIC:
        offset += 6
    start = offset + 4
    return _parse_metadata(memoryview(entry)[start : start + _U32.unpack_from(entry, offset)[0]])


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
        broker.writer.delete_cursor(str(topic.name), DEDUP_CURSOR)


def recover(broker: BrokerService, topic: Topic, dedup: MessageDeduplication, now_ms: int) -> None:
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
    over in one call (a batch's payload is read only for a batch entry).
    """
    highest: dict[str, int] = {}
    count = 0
    pos = after
    for pos, entry in topic.ledger.iter_entries(after):  # noqa: B007 - the last one is used below
        count += 1
        metadata = stored_metadata(entry)
        if metadata.num_chunks_from_msg > 0 and not is_last_chunk(metadata):
            continue
        sequence_id = metadata.sequence_id
        if metadata.HasField("num_messages_in_batch"):
            last = last_sequence_id(metadata, entry, sequence_id)
        else:
            last = max(sequence_id, metadata.highest_sequence_id)
        name = metadata.producer_name
        if last > highest.get(name, -1):
            highest[name] = last
    dedup.replay_entries(highest, count, pos)
    return count


def judge(topic: Topic, producer_name: str, sequence_id: int, entry: bytes,
          now_ms: int) -> tuple[DedupOutcome, int]:
    """The verdict on a send and the sequence id to record once it is persisted.

    That id is -1 for a chunk before the last: a chunked message is recorded by its
    last chunk, and recording an earlier chunk's id when it is persisted would make
    the last chunk, arriving after that, a duplicate (the message would be lost).
    """
    dedup = topic.dedup
    if dedup is None:
        return DedupOutcome.NOT_DUP, sequence_id
    metadata = stored_metadata(entry)
    last = last_sequence_id(metadata, entry, sequence_id)
    last_chunk = is_last_chunk(metadata)
    # A batch is judged by its last id (the rule for clients that never send
    # highest_sequence_id): one whose tail is new is stored whole rather than refused,
    # since a client resending the same batch would otherwise be refused forever.
    outcome = dedup.check(producer_name, sequence_id, last, now_ms, is_last_chunk=last_chunk, store_partial=True)
    if outcome is DedupOutcome.PARTIAL_DUP:
        outcome = DedupOutcome.NOT_DUP
    return outcome, last if last_chunk else NO_SEQUENCE_ID


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
        record = CursorRecord(mark_delete=snapshot.position, properties=dict(snapshot.properties),
                              last_active_ms=now_ms)
        written = broker.writer.put_cursors([(str(topic.name), DEDUP_CURSOR, record)])
        broker.on_loop(written, partial(_snapshot_written, topic, dedup, snapshot, now_ms))


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
    return getattr(topic, "dedup_snapshot_position", None)
