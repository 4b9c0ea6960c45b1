"""An entry's messages as column lists, without a Python object per message.

A batch entry is ``[size:4][SingleMessageMetadata][payload]`` repeated. The metadata
the sink and most producers write is a handful of bytes in one of few shapes (payload
size, maybe a key before it, maybe an event time, a sequence id and a null-value flag
after it): one regular expression recognises those shapes and reads the fields, a
fraction of what a protobuf parse costs. Anything else (properties, ordering keys,
compaction marks) is parsed by protobuf, message by message.

Before either, a run of messages of one shape (same value size, same metadata but for
the sequence id, as a producer of fixed-size records writes them) is found by numpy as
rows of a matrix, without a Python object per message, and left where it lies: the
values reach their Arrow column (:class:`BinaryColumn`) in one copy, when the batch that
holds them is laid out.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Protocol

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


class ColumnPart(Protocol):
    """Consecutive values of a binary column, copied into the column's buffers when it is laid out."""

    @property
    def rows(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> np.ndarray | None:
        """Copy the values to ``out[pos:]`` and their end offsets (from ``pos``) to ``ends``
        (``rows`` of them); return which are valid, None when all are."""


@dataclass(frozen=True)
class StridedRun:
    """``rows`` values of ``size`` bytes each, ``stride`` bytes apart in ``data`` from ``start``:
    a run of one shape read in place from its entry."""

    data: bytes
    start: int
    stride: int
    size: int
    rows: int

    @property
    def nbytes(self) -> int:
        return self.rows * self.size

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> None:
        import numpy as np
        rows, size = self.rows, self.size
        values = np.ndarray((rows, size), np.uint8, self.data, self.start, (self.stride, 1))
        out[pos:pos + rows * size].reshape(rows, size)[...] = values
        ends[:] = np.arange(1, rows + 1, dtype=np.int64) * size + pos
        return None


class PythonValues:
    """Values one by one (None: null)."""

    def __init__(self, values: list[bytes | None]) -> None:
        self.values = values
        self.nbytes = sum(len(v) for v in values if v is not None)

    @property
    def rows(self) -> int:
        return len(self.values)

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> np.ndarray | None:
        import numpy as np
        values = self.values
        nulls = None in values
        present = [v for v in values if v is not None] if nulls else values
        out[pos:pos + self.nbytes] = np.frombuffer(b"".join(present), np.uint8)  # type: ignore[arg-type]
        lengths = [0 if v is None else len(v) for v in values]
        # A few values (as a batch's last message, which carries its sequence id) cost less
        # summed in Python than handed to numpy.
        ends[:] = list(accumulate(lengths, initial=pos))[1:] if len(lengths) < 64 else np.cumsum(lengths) + pos
        return np.array([v is not None for v in values], bool) if nulls else None


@dataclass(frozen=True)
class RepeatedValue:
    """One value ``rows`` times."""

    value: bytes
    rows: int

    @property
    def nbytes(self) -> int:
        return self.rows * len(self.value)

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> None:
        import numpy as np
        size = len(self.value)
        # bytes repeat by doubling copies: far faster than numpy broadcasting a short row
        out[pos:pos + self.nbytes] = np.frombuffer(self.value * self.rows, np.uint8)
        ends[:] = np.arange(1, self.rows + 1, dtype=np.int64) * size + pos
        return None


class ArrowValues:
    """The values of an Arrow binary array (possibly a slice, possibly with nulls)."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array
        self.rows = len(array)
        offsets = self._offsets()
        self.nbytes = int(offsets[-1] - offsets[0])

    def _offsets(self) -> np.ndarray:
        import numpy as np
        buffer = self.array.buffers()[1]
        return np.frombuffer(buffer, np.int32, self.rows + 1, self.array.offset * 4) if buffer is not None else \
            np.zeros(self.rows + 1, np.int32)

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> np.ndarray | None:
        import numpy as np
        validity, _, data = self.array.buffers()
        offsets = self._offsets()
        if self.nbytes:
            out[pos:pos + self.nbytes] = np.frombuffer(data, np.uint8, self.nbytes, int(offsets[0]))
        ends[:] = offsets[1:] - (offsets[0] - pos)
        if not self.array.null_count or validity is None:
            return None
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        return bits[self.array.offset:self.array.offset + self.rows].astype(bool)


class BinaryColumn:
    """An Arrow binary column filled in order with Python values, runs read in place from
    entries and Arrow arrays alike, laid out (each value copied once) when asked for."""

    def __init__(self) -> None:
        self.parts: list[ColumnPart] = []
        self.pending: list[bytes | None] = []

    def add_chunk(self, chunk: pa.Array) -> None:
        self.add_part(ArrowValues(chunk))

    def add_part(self, part: ColumnPart) -> None:
        self._seal()
        self.parts.append(part)

    def take_all(self, other: BinaryColumn) -> int:
        """Append every value of ``other`` (which is left empty) without copying them; returns
        their size in bytes."""
        size = sum(part.nbytes for part in other.parts)
        if other.parts:
            self._seal()
            self.parts += other.parts
            other.parts = []
        if other.pending:
            size += sum(len(v) for v in other.pending if v is not None)
            self.pending += other.pending
            other.pending.clear()
        return size

    def array(self, type_: pa.DataType | None = None) -> pa.Array:
        """Everything so far as one array of ``type_`` (binary, or string when the values are
        UTF-8), which stays the column's only part."""
        import numpy as np
        import pyarrow as pa
        self._seal()
        type_ = type_ or pa.binary()
        if len(self.parts) == 1 and isinstance(self.parts[0], ArrowValues) and not self.parts[0].array.offset \
                and self.parts[0].array.type == type_:
            return self.parts[0].array
        rows = sum(part.rows for part in self.parts)
        out = np.empty(sum(part.nbytes for part in self.parts), np.uint8)
        offsets = np.empty(rows + 1, np.int32)
        offsets[0] = 0
        masks: list[tuple[int, np.ndarray]] = []
        row = pos = 0
        for part in self.parts:
            valid = part.write(out, pos, offsets[row + 1:row + 1 + part.rows])
            if valid is not None:
                masks.append((row, valid))
            row, pos = row + part.rows, pos + part.nbytes
        validity = None
        if masks:
            valid = np.ones(rows, bool)
            for at, mask in masks:
                valid[at:at + len(mask)] = mask
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        array = pa.Array.from_buffers(type_, rows, [validity, pa.py_buffer(offsets), pa.py_buffer(out)])
        self.parts = [ArrowValues(array)]
        return array

    def _seal(self) -> None:
        # ``pending`` stays the same list: decoding appends to it through a local name.
        if self.pending:
            self.parts.append(PythonValues(self.pending.copy()))
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
    # An uncompressed batch is split where it lies in the entry, without a copy.
    data, start = (entry, len(entry) - len(parsed.payload)) if meta.compression == pb.NONE else \
        (decompress(meta.compression, bytes(parsed.payload), meta.uncompressed_size), 0)
    out = EntryMessages(meta, is_batch(meta))
    if not out.batched:
        out.column.pending.append(None if meta.null_value else data[start:])
        out.keys.append(meta.partition_key if meta.HasField("partition_key") else None)
        out.event_ms.append(meta.event_time)
        out.properties.append({p.key: p.value for p in meta.properties} if meta.properties else _NO_PROPERTIES)
        return out
    _split_batch(data, start, meta.num_messages_in_batch, out)
    return out


def _split_batch(data: bytes, offset: int, count: int, out: EntryMessages) -> None:
    """Split the batch that runs from ``offset`` to the end of ``data``."""
    values, keys, events, props = out.column.pending, out.keys, out.event_ms, out.properties
    unpack, common, end = _U32.unpack_from, _COMMON_TAIL.fullmatch, len(data)
    # Runs are looked for at the start and, while they come long, after each other message.
    look, long_runs = True, False
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
    if not run:
        return 0, offset
    out.column.add_part(StridedRun(data, offset + 4 + meta_len, stride, size, run))
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
