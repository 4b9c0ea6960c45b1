"""An entry's messages as column lists, without a Python object per message.

A batch entry is ``[size:4][SingleMessageMetadata][payload]`` repeated. The metadata
the sink and most producers write is a handful of bytes in one of few shapes (payload
size, maybe a key before it, maybe an event time, a sequence id and a null-value flag
after it): one regular expression recognises those shapes and reads the fields, a
fraction of what a protobuf parse costs. Anything else (properties, ordering keys,
compaction marks) is parsed by protobuf, message by message.

Before either, a run of messages of one shape (same value size, same metadata but for
the sequence id, as a producer of fixed-size records writes them) is found and cut out
by numpy as rows of a matrix, without a Python object per message.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import BatchError, decompress, is_batch
from magnetar.wire.frames import parse_entry, verify_entry_checksum

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_U32 = struct.Struct(">I")
_VARINT = rb"[\x80-\xff]{0,9}[\x00-\x7f]"
#: payload_size (3), then optionally event_time (5), sequence_id (8), null_value (9).
#: payload_size (3) and optionally sequence_id (8): the metadata a run of messages may have.
_SIZE_AND_SEQUENCE = re.compile(rb"\x18(" + _VARINT + rb")(?:\x40" + _VARINT + rb")?", re.DOTALL)
_COMMON_TAIL = re.compile(rb"\x18(" + _VARINT + rb")(?:\x28(" + _VARINT + rb"))?(?:\x40" + _VARINT +
                          rb")?(?:\x48([\x00-\x7f]))?", re.DOTALL)
_PARSE_SINGLE = pb.SingleMessageMetadata.FromString
#: A run shorter than this does not pay for the matrix set-up of looking for another one.
_MIN_RUN = 16
_NO_PROPERTIES: dict[str, str] = {}


class UnsupportedEntry(Exception):
    """An entry only the official client can read (encrypted or chunked)."""


class BinaryColumn:
    """An Arrow binary column filled in order with Python values and Arrow chunks alike."""

    def __init__(self) -> None:
        self.chunks: list[pa.Array] = []
        self.pending: list[bytes | None] = []

    def add_chunk(self, chunk: pa.Array) -> None:
        self._seal()
        self.chunks.append(chunk)

    def take_all(self, other: BinaryColumn) -> int:
        """Append every value of ``other`` (which is left empty) without copying them; returns
        their size in bytes."""
        other._seal()
        self._seal()
        self.chunks += other.chunks
        size = sum(chunk.nbytes for chunk in other.chunks)
        other.chunks = []
        return size

    def array(self) -> pa.Array:
        """Everything so far as one array (which stays the column's only chunk)."""
        import pyarrow as pa
        self._seal()
        if len(self.chunks) != 1:
            self.chunks = [pa.concat_arrays(self.chunks) if self.chunks else pa.array([], pa.binary())]
        return self.chunks[0]

    def _seal(self) -> None:
        import pyarrow as pa
        if self.pending:
            self.chunks.append(pa.array(self.pending, pa.binary()))
            self.pending.clear()


@dataclass
class EntryMessages:
    """The messages of one entry, in batch-index order (a null value, or one compaction took
    out, is None)."""

    metadata: pb.MessageMetadata
    batched: bool
    column: BinaryColumn = field(default_factory=BinaryColumn)
    keys: list[str | None] = field(default_factory=list)
    #: Milliseconds; 0: unset.
    event_ms: list[int] = field(default_factory=list)
    properties: list[dict[str, str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.keys)

    @property
    def values(self) -> pa.Array:
        return self.column.array()


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
        out.column.pending.append(None if meta.null_value else payload)
        out.keys.append(meta.partition_key if meta.HasField("partition_key") else None)
        out.event_ms.append(meta.event_time)
        out.properties.append({p.key: p.value for p in meta.properties} if meta.properties else _NO_PROPERTIES)
        return out
    _split_batch(payload, meta.num_messages_in_batch, out)
    return out


def _split_batch(data: bytes, count: int, out: EntryMessages) -> None:
    values, keys, events, props = out.column.pending, out.keys, out.event_ms, out.properties
    unpack, common, end = _U32.unpack_from, _COMMON_TAIL.fullmatch, len(data)
    # Runs are looked for at the start and, while they come long, after each other message.
    offset, look, long_runs = 0, True, False
    try:
        while len(keys) < count:
            if look and count - len(keys) >= _MIN_RUN:
                run, offset = _uniform_run(data, offset, count - len(keys), out)
                if run:
                    # Another shape may start a run of its own right after a long one.
                    long_runs = look = run >= _MIN_RUN
                    continue
                look = False
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
            look = long_runs
            if offset > end:
                raise BatchError(f"batch message {len(keys) - 1} overruns the batch")
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise BatchError(f"batch of {count} messages is malformed: {error}") from error
    if offset != end:
        raise BatchError(f"batch of {count} messages has {end - offset} bytes left over")


def _uniform_run(data: bytes, offset: int, most: int, out: EntryMessages) -> tuple[int, int]:
    """Take the messages from ``offset`` on that have the shape of the first: metadata of the
    same length holding the same payload size and at most a sequence id after it. Returns
    how many were taken (0: the first has another shape) and where the next message starts."""
    import numpy as np
    import pyarrow as pa
    meta_len = _U32.unpack_from(data, offset)[0]
    found = _SIZE_AND_SEQUENCE.fullmatch(data, offset + 4, offset + 4 + meta_len) if meta_len < 32 else None
    if found is None:
        return 0, offset
    # The bytes every message of the run has alike: meta length, payload size, sequence id tag.
    size, fixed = _varint(found.group(1)), found.end(1) - offset + (found.end() > found.end(1))
    stride = 4 + meta_len + size
    rows = min(most, (len(data) - offset) // stride)
    if rows < 1:
        return 0, offset
    matrix = np.frombuffer(data, np.uint8, rows * stride, offset).reshape(rows, stride)
    same = _same_prefix(data, offset, rows, stride, fixed) if stride >= 16 else \
        (matrix[:, :fixed] == matrix[0, :fixed]).all(axis=1)
    if fixed < 4 + meta_len:  # a sequence id: continuation bits on all its bytes but the last
        same &= (matrix[:, fixed:3 + meta_len] >= 0x80).all(axis=1) & (matrix[:, 3 + meta_len] < 0x80)
    run = rows if same.all() else int(same.argmin())
    value_bytes = np.ascontiguousarray(matrix[:run, 4 + meta_len:]).reshape(-1)
    offsets = np.arange(run + 1, dtype=np.int32) * size
    out.column.add_chunk(pa.Array.from_buffers(pa.binary(), run, [None, pa.py_buffer(offsets),
                                                               pa.py_buffer(value_bytes)]))
    out.keys += [None] * run
    out.event_ms += [0] * run
    out.properties += [_NO_PROPERTIES] * run
    return run, offset + run * stride


def _same_prefix(data: bytes, offset: int, rows: int, stride: int, fixed: int) -> np.ndarray:
    """Whether each of ``rows`` records ``stride`` bytes apart starts with the first one's
    ``fixed`` (at most 16) bytes: compared as two little-endian 64-bit words a record, read in
    place, which costs a fraction of comparing a byte matrix and reducing its rows."""
    import numpy as np
    low = np.ndarray((rows,), "<u8", data, offset, (stride,))
    if fixed <= 8:
        masked = low & np.uint64((1 << 8 * fixed) - 1)
        return masked == masked[0]
    high = np.ndarray((rows,), "<u8", data, offset + 8, (stride,)) & np.uint64((1 << 8 * (fixed - 8)) - 1)
    return (low == low[0]) & (high == high[0])


def _add_parsed(data: bytes, start: int, stop: int, out: EntryMessages) -> int:
    """One message whose metadata the fast shapes do not cover; returns where the next starts."""
    single = _PARSE_SINGLE(data[start:stop])
    end = stop + single.payload_size
    compacted = single.compacted_out
    out.column.pending.append(None if single.null_value or compacted else data[stop:end])
    out.keys.append(single.partition_key if single.HasField("partition_key") else None)
    out.event_ms.append(single.event_time)
    out.properties.append({p.key: p.value for p in single.properties} if single.properties else _NO_PROPERTIES)
    return end


def _varint(data: bytes) -> int:
    value = 0
    for shift, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * shift)
    return value
