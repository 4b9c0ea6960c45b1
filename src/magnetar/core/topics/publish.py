"""The publish path: what the broker decides about a SEND, from its entry to the append.

In Pulsar's order (``PersistentTopic.publishMessage`` and ``MessageDeduplication``):
the delivery delay is bounded by policy, producer deduplication judges the sequence
ids, the business-id window judges the message property, and only then is the entry
appended. A duplicate is answered with a receipt at (-1, -1) in order with the
receipts still pending; a send deduplication cannot judge yet is refused with a
retryable error. The shell hands over the SENDs as they came; everything here is a
function of the topic, the entries and the time, so the simulation runs it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import islice

from magnetar.core.dedup.message_deduplication import NO_SEQUENCE_ID, DedupOutcome
from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.dedup.recorded_batch import with_last_sequence_id
from magnetar.core.entry import EntryInfo
from magnetar.core.errors import BrokerError, NotAllowed, PersistenceError, ServerError
from magnetar.core.policies.disk_usage import DiskUsage
from magnetar.core.positions import Position
from magnetar.core.topics.managed_ledger import AppendFailed
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Send, Topic
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import MAGIC_BROKER_ENTRY_METADATA, MAGIC_CRC32C, ProtocolError, checked_metadata

_U32 = struct.Struct(">I")
_BROKER_ENTRY_MAGIC = MAGIC_BROKER_ENTRY_METADATA.to_bytes(2, "big")
_CRC_MAGIC = MAGIC_CRC32C.to_bytes(2, "big")
_parse_metadata = pb.MessageMetadata.FromString


#: A SEND as it came off the wire: sequence id, highest sequence id, messages, the entry.
RawSend = tuple[int, int, int, bytes]


def publish(topic: Topic, producer: Producer, sends: Sequence[RawSend], now_ms: int,
            disk: DiskUsage | None = None) -> tuple[int, list[Position]]:
    """Judge and append a prefix of one producer's sends, at least the first; a single
    SEND is a run of one. Returns how many sends were taken and the positions appended
    (none when the first was a duplicate, answered in order with the pending receipts).

    A run is the sends that check out one after the other: one check of the topic and
    one ``append_many`` for a read's worth. Deduplication (either kind) judges one send
    at a time, each against what the one before recorded, so on such a topic the first
    goes alone. Raises :class:`BrokerError` for the first send when it is refused: the
    shell answers it and calls again with the rest."""
    _check_open(producer)
    if disk is not None and (refusal := disk.refusal()) is not None:
        raise PersistenceError(refusal)
    first = checked_send(topic, sends[0])
    if topic.dedup is not None or topic.property_dedup is not None:
        pos = _publish_judged(topic, producer, first, now_ms)
        return 1, [] if pos is None else [pos]
    run = [first]
    for raw in islice(sends, 1, None):
        try:
            run.append(checked_send(topic, raw))
        except BrokerError:
            break  # it comes first in the next call, which answers it
    try:
        positions = topic.append(producer, run, now_ms)
    except AppendFailed as exc:
        raise _not_stored(topic, exc) from None
    return len(positions), positions


def checked_send(topic: Topic, raw: RawSend) -> Send:
    """The send with its metadata, or why it must not be stored: a stored entry is
    replayed to every consumer, and one whose metadata cannot be read would stop its
    subscriptions for good. Parsed once here; dispatch reuses it."""
    sequence_id, highest, num_messages, entry = raw
    try:
        metadata = checked_metadata(entry)
    except ProtocolError as exc:
        raise NotAllowed(f"Malformed message: {exc}") from None
    if metadata is None:
        raise BrokerError("Checksum of the message does not match its content", ServerError.ChecksumError)
    if metadata.HasField("deliver_at_time"):
        refused = delay_problem(topic.applied.max_delivery_delay_ms, metadata)
        if refused is not None:
            raise refused
    return sequence_id, highest, num_messages, entry, EntryInfo.of(metadata)


def _publish_judged(topic: Topic, producer: Producer, send: Send, now_ms: int) -> Position | None:
    """Judge one send by deduplication, then append it; None for a duplicate (answered).

    Raises :class:`PersistenceError` when deduplication cannot judge the send yet or the
    ledger could not write (the client retries either)."""
    sequence_id, highest, num_messages, entry, info = send
    if topic.dedup is not None:
        recorded = with_last_sequence_id(info.metadata, entry, last_sequence_id(info.metadata),
                                         topic.config.maxMessageSize)
        if recorded is not None:
            entry = recorded[1]
            info = info._replace(metadata=recorded[0])
            send = (sequence_id, highest, num_messages, entry, info)
    outcome, last_id = judge_sequence(topic, producer.producer_name, sequence_id, info.metadata, now_ms)
    if outcome is DedupOutcome.DUP:
        topic.answer_duplicate(producer, sequence_id, highest)
        return None
    if outcome is not DedupOutcome.NOT_DUP:
        raise PersistenceError(
            f"Cannot determine whether message {sequence_id} of {producer.producer_name} is a duplicate "
            f"({outcome.value}); retry")
    dedup_id = judge_business_id(topic, info, now_ms)
    if dedup_id is False:
        topic.answer_duplicate(producer, sequence_id, highest)
        return None
    business = dedup_id if isinstance(dedup_id, str) else None
    try:
        return topic.append(producer, [send], now_ms, (last_id, business))[0]
    except AppendFailed as exc:
        raise _not_stored(topic, exc) from None


def _check_open(producer: Producer) -> None:
    """A producer disconnected after a failed write (sends of it the shell still holds)
    stores nothing more: its client resends, in order, once it reconnected."""
    if producer.closed:
        raise NotAllowed(f"Producer {producer.producer_name} was disconnected; reconnect and resend")


def _not_stored(topic: Topic, failure: AppendFailed) -> PersistenceError:
    """Writing earlier buffered appends failed, and the send at hand was not appended
    either: the earlier ones are answered with errors, and so is it (the error returned)."""
    topic.appends_taken_back(failure.position, failure.reason)
    return PersistenceError(f"Cannot store the message on {topic.name}: {failure.reason}; retry")


def delay_problem(limit_ms: int, metadata: pb.MessageMetadata) -> NotAllowed | None:
    """As Pulsar, refuse a message to be delivered further after its publish time than
    ``delayedDeliveryMaxDelayInMillis`` (or the namespace's ``maxDeliveryDelayInMillis``)
    allows, rather than hold it for longer than the operator wants (0: no limit)."""
    if limit_ms > 0 and metadata.HasField("deliver_at_time") and \
            metadata.deliver_at_time - metadata.publish_time > limit_ms:
        return NotAllowed(f"Exceeds max allowed delivery delay of {limit_ms} milliseconds")
    return None


def judge_sequence(topic: Topic, producer_name: str, sequence_id: int, metadata: pb.MessageMetadata,
                   now_ms: int) -> tuple[DedupOutcome, int]:
    """The verdict on a send and the sequence id to record once it is persisted.

    That id is -1 for a chunk before the last: a chunked message is recorded by its
    last chunk, and recording an earlier chunk's id when it is persisted would make
    the last chunk, arriving after that, a duplicate (the message would be lost).
    """
    dedup = topic.dedup
    if dedup is None:
        return DedupOutcome.NOT_DUP, sequence_id
    last = last_sequence_id(metadata)
    last_chunk = is_last_chunk(metadata)
    # A batch is judged by its last id (the rule for clients that never send
    # highest_sequence_id): one whose tail is new is stored whole rather than refused,
    # since a client resending the same batch would otherwise be refused forever.
    outcome = dedup.check(producer_name, sequence_id, last, now_ms, is_last_chunk=last_chunk, store_partial=True)
    if outcome is DedupOutcome.PARTIAL_DUP:
        outcome = DedupOutcome.NOT_DUP
    return outcome, last if last_chunk else NO_SEQUENCE_ID


def judge_business_id(topic: Topic, info: EntryInfo, now_ms: int) -> str | bool | None:
    """The business id to record, False for a duplicate, None when the window does not
    apply (no window, a batch, no such property)."""
    window = topic.property_dedup
    if window is None:
        return None
    dedup_id = business_id(window, info)
    if dedup_id is None:
        return None
    if window.check_and_record(dedup_id, now_ms):
        if window.is_pending(dedup_id):
            raise PersistenceError(f"A message with {window.property_name}={dedup_id} is being stored; retry")
        return False
    return dedup_id


def business_id(window: PropertyDedupWindow, info: EntryInfo) -> str | None:
    """The entry's business id: None for batches and messages without the property."""
    if info.metadata.HasField("num_messages_in_batch"):
        return None
    for kv in info.metadata.properties:
        if kv.key == window.property_name:
            return str(kv.value)
    return None


def last_sequence_id(metadata: pb.MessageMetadata) -> int:
    """The sequence id an entry is recorded by, from its metadata alone (never the
    payload, which may be encrypted, compressed or a chunk): ``highest_sequence_id``
    when set (never below ``sequence_id``), else ``sequence_id + num_messages_in_batch
    - 1`` for a batch (a count below 1 counts as 1), else ``sequence_id``."""
    sequence_id = int(metadata.sequence_id)
    if metadata.HasField("highest_sequence_id"):
        return max(sequence_id, int(metadata.highest_sequence_id))
    if metadata.HasField("num_messages_in_batch"):
        return sequence_id + max(int(metadata.num_messages_in_batch), 1) - 1
    return sequence_id


def is_last_chunk(metadata: pb.MessageMetadata) -> bool:
    """False for the chunks before the last of a chunked message (they are judged by the last).

    Read from the values, not field presence: an absent ``num_chunks_from_msg`` reads
    0, and a message in 0 chunks is no chunked message either.
    """
    chunks = metadata.num_chunks_from_msg
    return chunks <= 0 or metadata.chunk_id == chunks - 1


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
    end = start + _U32.unpack_from(entry, offset)[0]
    metadata: pb.MessageMetadata = _parse_metadata(memoryview(entry)[start:end])
    return metadata
