"""Topic compaction's algorithm: the latest message of every key (Pulsar's ``TwoPhaseCompactor``).

Compaction reads its input twice, so that memory holds one message id per key and never
a payload (payloads may be orders of magnitude larger than ids):

- phase one walks every message and keeps, per key, the id of the latest one; an empty
  payload (or ``null_value``) is a tombstone that removes the key;
- phase two walks the same messages again and keeps those whose id is still the latest
  of their key. A batch entry survives if any of its messages does, and is rewritten as
  Pulsar's ``RawBatchConverter.rebatchMessage`` does: same MessageMetadata and batch
  size, the dropped messages replaced by empty records marked ``compacted_out`` (clients
  skip them), so batch indexes and message ids stay what they were; the payload is
  compressed again with the batch's own codec.

As in Pulsar 3.2+ (PIP-318), messages without a key are dropped unless
``topicCompactionRetainNullKey`` is set, and server-only markers are always dropped. An
encrypted batch cannot be read by the broker: like Pulsar, compaction keeps it whole. A
chunked message counts at its last chunk, and all its chunks stay while it is the latest
of its key.

The input is an iterable of ``(position, entry)`` over the previous compacted view then the
topic from the previous horizon on, so compaction is incremental. Pure functions, no I/O:
the shell runs them on a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from magnetar.core.positions import Position
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress, is_batch, iter_batch, make_batch
from magnetar.wire.frames import ProtocolError, make_entry, parse_entry

#: A message's id within the topic: its entry, its index in the batch (-1: not a batch) and,
#: for a chunked message, its ``uuid`` ("" otherwise; the id is its last chunk's).
MessageRef = tuple[Position, int, str]

#: The input, read once per phase: a callable so that each phase gets a fresh scan.
EntryScan = Callable[[], Iterable[tuple[Position, bytes]]]


@dataclass(frozen=True, slots=True)
class _Message:
    key: str | None
    tombstone: bool


@dataclass
class CompactionResult:
    """What phase two wrote and what it left out, for the topic's compaction stats."""

    messages_read: int = 0
    messages_kept: int = 0
    entries_kept: int = 0

    @property
    def removed(self) -> int:
        """``lastCompactionRemovedEventCount``: messages the compacted view no longer holds."""
        return self.messages_read - self.messages_kept


def _message_of(key_field: bool, key: str, payload_size: int, null_value: bool) -> _Message:
    return _Message(key if key_field else None, payload_size == 0 or null_value)


def _readable_batch(metadata: pb.MessageMetadata) -> bool:
    return is_batch(metadata) and not metadata.encryption_keys


_Records = list[tuple[pb.SingleMessageMetadata, bytes]]


def _entry_messages(entry: bytes) -> tuple[pb.MessageMetadata, memoryview | bytes, _Records]:
    """Metadata, payload and, for a readable batch, its messages; ProtocolError if unreadable."""
    parsed = parse_entry(entry)
    records = iter_batch(parsed.metadata, parsed.payload) if _readable_batch(parsed.metadata) else []
    return parsed.metadata, parsed.payload, records


def _is_chunk(metadata: pb.MessageMetadata) -> bool:
    return metadata.num_chunks_from_msg > 1


def _keyed_messages(pos: Position, metadata: pb.MessageMetadata, payload: memoryview | bytes,
                    records: _Records) -> list[tuple[MessageRef, _Message]]:
    """The messages of an entry that phase one counts, with their ids."""
    if metadata.HasField("marker_type") or not _readable_batch(metadata) and is_batch(metadata):
        return []
    if records:
        return [((pos, i, ""), _message_of(s.HasField("partition_key"), s.partition_key, s.payload_size,
                                           s.null_value))
                for i, (s, _) in enumerate(records) if not s.compacted_out]
    if _is_chunk(metadata) and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
        return []  # a chunked message counts once it is whole: at its last chunk
    uuid = metadata.uuid if _is_chunk(metadata) else ""
    message = _message_of(metadata.HasField("partition_key"), metadata.partition_key,
                          metadata.total_chunk_msg_size if uuid else len(payload), metadata.null_value)
    return [((pos, -1, uuid), message)]


def latest_for_key(scan: Iterable[tuple[Position, bytes]]) -> dict[str, MessageRef]:
    """Phase one: the id of the latest live message of every key."""
    latest: dict[str, MessageRef] = {}
    for pos, entry in scan:
        try:
            metadata, payload, records = _entry_messages(entry)
        except ProtocolError:
            continue  # an unreadable entry is kept whole by phase two and names no key
        for ref, message in _keyed_messages(pos, metadata, payload, records):
            if message.key is None:
                continue
            if message.tombstone:
                latest.pop(message.key, None)
            else:
                latest[message.key] = ref
    return latest


def compacted_entries(scan: Iterable[tuple[Position, bytes]], latest: dict[str, MessageRef],
                      result: CompactionResult, retain_null_key: bool = False) -> Iterator[tuple[Position, bytes]]:
    """Phase two: the entries of the compacted view, in position order."""
    for pos, entry in scan:
        try:
            metadata, payload, records = _entry_messages(entry)
        except ProtocolError:
            kept: bytes | None = entry
            result.messages_read += 1
            result.messages_kept += 1
        else:
            kept = _compact_entry(pos, entry, metadata, payload, records, latest, result, retain_null_key)
        if kept is not None:
            result.entries_kept += 1
            yield pos, kept


def _compact_entry(pos: Position, entry: bytes, metadata: pb.MessageMetadata, payload: memoryview | bytes,
                   records: _Records, latest: dict[str, MessageRef],
                   result: CompactionResult, retain_null_key: bool) -> bytes | None:
    if not is_batch(metadata) or not _readable_batch(metadata):
        count = metadata.num_messages_in_batch if is_batch(metadata) else 1
        result.messages_read += count
        keep = _keep_whole(pos, metadata, payload, latest, retain_null_key)
        result.messages_kept += count if keep else 0
        return entry if keep else None
    if not records:
        return None  # an empty batch holds nothing
    return _rebatch(pos, entry, metadata, records, latest, result, retain_null_key)


def _keep_whole(pos: Position, metadata: pb.MessageMetadata, payload: memoryview | bytes,
                latest: dict[str, MessageRef], retain_null_key: bool) -> bool:
    """Whether an entry read as one message survives (an encrypted batch always does:
    the broker cannot look inside, and Pulsar keeps it too)."""
    if metadata.HasField("marker_type"):
        return False
    if is_batch(metadata):
        return True
    if not metadata.HasField("partition_key"):
        return retain_null_key
    ref = latest.get(metadata.partition_key)
    if _is_chunk(metadata):  # every chunk of the latest message, so the client can join them
        return ref is not None and ref[2] == metadata.uuid
    return ref == (pos, -1, "") and len(payload) > 0


def _rebatch(pos: Position, entry: bytes, metadata: pb.MessageMetadata, records: _Records,
             latest: dict[str, MessageRef],
             result: CompactionResult, retain_null_key: bool) -> bytes | None:
    """The batch with only its surviving messages (Pulsar's ``RawBatchConverter.rebatchMessage``)."""
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    kept = 0
    for index, (single, body) in enumerate(records):
        if single.compacted_out:
            out.append((pb.SingleMessageMetadata(compacted_out=True), b""))
            continue
        result.messages_read += 1
        if not single.HasField("partition_key"):
            survives = retain_null_key
        else:
            survives = latest.get(single.partition_key) == (pos, index, "") and len(body) > 0
        if survives:
            kept += 1
            out.append((single, body))
        else:
            out.append((pb.SingleMessageMetadata(compacted_out=True), b""))
    result.messages_kept += kept
    if kept == 0:
        return None
    if kept == len(records):
        return entry
    data = make_batch(out)
    rewritten = pb.MessageMetadata()
    rewritten.CopyFrom(metadata)
    rewritten.uncompressed_size = len(data)
    return make_entry(rewritten, compress(metadata.compression, data))


def compact(scan: EntryScan, retain_null_key: bool = False,
            result: CompactionResult | None = None) -> Iterator[tuple[Position, bytes]]:
    """Both phases over ``scan``: the compacted view's entries, counted into ``result``."""
    latest = latest_for_key(scan())
    return compacted_entries(scan(), latest, result if result is not None else CompactionResult(), retain_null_key)
