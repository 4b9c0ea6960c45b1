"""An entry's messages as column lists, without a Python object per message.

A batch entry is ``[size:4][SingleMessageMetadata][payload]`` repeated. The metadata
the sink and most producers write is a handful of bytes in one of few shapes (payload
size, maybe a key before it, maybe an event time, a sequence id and a null-value flag
after it): one regular expression recognises those shapes and reads the fields, a
fraction of what a protobuf parse costs. Anything else (properties, ordering keys,
compaction marks) is parsed by protobuf, message by message.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import BatchError, decompress, is_batch
from magnetar.wire.frames import parse_entry, verify_entry_checksum

_U32 = struct.Struct(">I")
_VARINT = rb"[\x80-\xff]{0,9}[\x00-\x7f]"
#: payload_size (3), then optionally event_time (5), sequence_id (8), null_value (9).
_COMMON_TAIL = re.compile(rb"\x18(" + _VARINT + rb")(?:\x28(" + _VARINT + rb"))?(?:\x40" + _VARINT +
                          rb")?(?:\x48([\x00-\x7f]))?", re.DOTALL)
_PARSE_SINGLE = pb.SingleMessageMetadata.FromString
_NO_PROPERTIES: dict[str, str] = {}


class UnsupportedEntry(Exception):
    """An entry only the official client can read (encrypted or chunked)."""


@dataclass
class EntryMessages:
    """The messages of one entry, in batch-index order (a null value, or one compaction took
    out, is None)."""

    metadata: pb.MessageMetadata
    batched: bool
    values: list[bytes | None] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    #: Milliseconds; 0: unset.
    event_ms: list[int] = field(default_factory=list)
    properties: list[dict[str, str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.values)


def decode_entry(entry: bytes) -> EntryMessages:
    """Split an entry as stored into its messages; a corrupt entry raises BatchError."""
    if verify_entry_checksum(entry) is False:
        raise BatchError("entry checksum mismatch: the stored bytes are corrupt")
    parsed = parse_entry(entry)
    meta = parsed.metadata
    if meta.encryption_keys or meta.HasField("chunk_id") or meta.HasField("num_chunks_from_msg"):
        raise UnsupportedEntry("encrypted or chunked entry")
    payload = decompress(meta.compression, bytes(parsed.payload), meta.uncompressed_size)
    out = EntryMessages(meta, is_batch(meta))
    if not out.batched:
        out.values.append(None if meta.null_value else payload)
        out.keys.append(meta.partition_key if meta.HasField("partition_key") else None)
        out.event_ms.append(meta.event_time)
        out.properties.append({p.key: p.value for p in meta.properties} if meta.properties else _NO_PROPERTIES)
        return out
    _split_batch(payload, meta.num_messages_in_batch, out)
    return out


def _split_batch(data: bytes, count: int, out: EntryMessages) -> None:
    values, keys, events, props = out.values, out.keys, out.event_ms, out.properties
    unpack, common, end = _U32.unpack_from, _COMMON_TAIL.fullmatch, len(data)
    offset = 0
    try:
        for _ in range(count):
            start = offset + 4
            stop = start + unpack(data, offset)[0]
            key = None
            tail_at = start
            if data[start] == 0x12 and data[start + 1] < 0x80:  # a short partition key first
                tail_at = start + 2 + data[start + 1]
                key = data[start + 2:tail_at].decode()
            found = common(data, tail_at, stop) if tail_at < stop else None
            if found is not None:
                size_bytes, event_bytes, null = found.groups()
                offset = stop + (size_bytes[0] if len(size_bytes) == 1 else _varint(size_bytes))
                values.append(data[stop:offset] if null is None or null == b"\x00" else None)
                keys.append(key)
                events.append(_varint(event_bytes) if event_bytes is not None else 0)
                props.append(_NO_PROPERTIES)
            else:
                offset = _add_parsed(data, start, stop, out)
            if offset > end:
                raise BatchError(f"batch message {len(values) - 1} overruns the batch")
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise BatchError(f"batch of {count} messages is malformed: {error}") from error
    if offset != end:
        raise BatchError(f"batch of {count} messages has {end - offset} bytes left over")


def _add_parsed(data: bytes, start: int, stop: int, out: EntryMessages) -> int:
    """One message whose metadata the fast shapes do not cover; returns where the next starts."""
    single = _PARSE_SINGLE(data[start:stop])
    end = stop + single.payload_size
    compacted = single.compacted_out
    out.values.append(None if single.null_value or compacted else data[stop:end])
    out.keys.append(single.partition_key if single.HasField("partition_key") else None)
    out.event_ms.append(single.event_time)
    out.properties.append({p.key: p.value for p in single.properties} if single.properties else _NO_PROPERTIES)
    return end


def _varint(data: bytes) -> int:
    value = 0
    for shift, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * shift)
    return value
