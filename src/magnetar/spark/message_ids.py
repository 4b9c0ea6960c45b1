"""Serialised message ids (``MessageIdData`` protobuf bytes) read and written without the client.

Every call into the official client costs about a microsecond, and a message id costs
three (fetch, serialise, compare). The messages of one batch entry differ in their id
only by the batch index, so one serialised id says what every other message of its
entry is called: the reader asks the client for the first id of an entry and writes
the others itself, byte for byte what ``MessageId.serialize()`` would return.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

#: Field numbers of ``MessageIdData`` (PulsarApi.proto).
LEDGER_ID = 1
ENTRY_ID = 2
PARTITION = 3
BATCH_INDEX = 4
BATCH_SIZE = 6
_BATCH_INDEX_TAG = bytes([BATCH_INDEX << 3])  # varint wire type 0


def decode_fields(data: bytes) -> dict[int, int]:
    """The varint fields of a ``MessageIdData``, read as signed 64-bit values."""
    return {number: value for number, value, _ in _fields(data)}


def _fields(data: bytes) -> list[tuple[int, int, slice]]:
    """(field number, value, bytes of the whole field) for each field; length-delimited
    fields (the chunked id's first chunk) get value 0."""
    out: list[tuple[int, int, slice]] = []
    i = 0
    while i < len(data):
        start = i
        key, i = read_varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = read_varint(data, i)
            out.append((number, value - (1 << 64) if value >= (1 << 63) else value, slice(start, i)))
        elif wire_type == 2:
            length, i = read_varint(data, i)
            i += length
            if i > len(data):
                raise ValueError("field runs past the end")
            out.append((number, 0, slice(start, i)))
        else:
            raise ValueError("unexpected wire type")
    return out


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def encode_varint(value: int) -> bytes:
    """Protobuf's varint of a non-negative integer."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@cache
def _small_varints() -> tuple[bytes, ...]:
    """Varints of every batch index below 2^14 (one or two bytes), built once."""
    return tuple(encode_varint(i) for i in range(1 << 14))


@dataclass(frozen=True)
class EntryIds:
    """One message's serialised id, taken apart to name the other messages of its entry.

    ``batch_index`` is -1 and ``batch_size`` 0 for a message that is not part of a batch.
    """

    ledger_id: int
    entry_id: int
    batch_index: int
    batch_size: int
    #: The serialised fields before and after the batch index (protobuf writes fields in
    #: number order, so the batch index sits between the partition and the batch size).
    head: bytes
    tail: bytes
    serialized: bytes

    @classmethod
    def parse(cls, data: bytes) -> EntryIds:
        fields = _fields(data)
        values = {number: value for number, value, _ in fields}
        head = b"".join(data[s] for number, _, s in fields if number < BATCH_INDEX)
        tail = b"".join(data[s] for number, _, s in fields if number > BATCH_INDEX)
        batch_index = values.get(BATCH_INDEX, -1)
        return cls(values.get(LEDGER_ID, -1), values.get(ENTRY_ID, -1), batch_index if batch_index >= 0 else -1,
                   max(values.get(BATCH_SIZE, 0), 0), head, tail, data)

    @property
    def entry_size_known(self) -> bool:
        """Whether this id tells how many messages its entry has (one when not a batch)."""
        return self.batch_index < 0 or self.batch_size > self.batch_index

    @property
    def rest_of_entry(self) -> int:
        """How many messages of the entry follow this one; 0 when not known."""
        if self.batch_index < 0 or self.batch_size <= self.batch_index:
            return 0
        return self.batch_size - 1 - self.batch_index

    def with_batch_index(self, batch_index: int) -> bytes:
        """The serialised id of the message at ``batch_index`` of the same entry."""
        return b"".join((self.head, _BATCH_INDEX_TAG, encode_varint(batch_index), self.tail))

    def following(self, count: int) -> list[bytes]:
        """The serialised ids of the ``count`` messages after this one in its entry."""
        head, tail = self.head + _BATCH_INDEX_TAG, self.tail
        first = self.batch_index + 1
        table = _small_varints()
        if first + count <= len(table):
            return [head + v + tail for v in table[first:first + count]]
        return [head + encode_varint(i) + tail for i in range(first, first + count)]

    def batch_ids(self, lo: int, hi: int) -> pa.Array:
        """The serialised ids of batch indexes ``lo`` to ``hi`` (exclusive) of this id's entry, as
        an Arrow binary array."""
        from magnetar.spark.entry_decoding import BinaryColumn
        column = BinaryColumn()
        column.add_part(self.batch_id_run(lo, hi))
        return column.array()

    def batch_id_run(self, lo: int, hi: int) -> BatchIdRun:
        """The serialised ids of batch indexes ``lo`` to ``hi`` (exclusive) of this id's entry, as
        a part of a binary column, written in place when the column is laid out."""
        return BatchIdRun(self.head + _BATCH_INDEX_TAG, self.tail, lo, hi)


@dataclass(frozen=True)
class BatchIdRun:
    """Ids ``head + varint(index) + tail`` of indexes ``lo`` to ``hi`` (exclusive), laid out by
    numpy: one matrix per varint width of the index, whose index bytes and offsets are made
    once per layout (:func:`_batch_id_layout`)."""

    head: bytes
    tail: bytes
    lo: int
    hi: int

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    @property
    def nbytes(self) -> int:
        return int(self._layout()[1][-1])

    def _layout(self) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
        return _batch_id_layout(self.lo, self.hi, len(self.head), len(self.tail))

    def write(self, out: np.ndarray, pos: int, ends: np.ndarray) -> None:
        import numpy as np
        head, tail = self.head, self.tail
        groups, offsets = self._layout()
        head_bytes, tail_bytes = np.frombuffer(head, np.uint8), np.frombuffer(tail, np.uint8)
        for at, index_bytes in groups:
            rows, width = index_bytes.shape
            matrix = out[pos + at:pos + at + rows * (len(head) + width + len(tail))].reshape(rows, -1)
            matrix[:, :len(head)] = head_bytes
            matrix[:, len(head):len(head) + width] = index_bytes
            matrix[:, len(head) + width:] = tail_bytes
        ends[:] = offsets[1:]
        ends += pos
        return None


@lru_cache(maxsize=64)
def _batch_id_layout(lo: int, hi: int, head_len: int, tail_len: int,
                     ) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """For ids ``head + varint(index) + tail`` of indexes ``lo`` to ``hi``: per varint width,
    where its rows start and their index bytes; and the ids' offsets (int32)."""
    import numpy as np
    groups, offsets, at, width = [], [np.zeros(1, np.int64)], 0, 1
    while lo < hi:
        stop = min(hi, 1 << (7 * width))
        if stop <= lo:  # indexes of this width come before lo
            width += 1
            continue
        index = np.arange(lo, stop, dtype=np.int64)
        index_bytes = np.empty((stop - lo, width), np.uint8)
        for j in range(width):
            index_bytes[:, j] = (index >> (7 * j)) & 0x7F | (0x80 if j < width - 1 else 0)
        row = head_len + width + tail_len
        groups.append((at, index_bytes))
        offsets.append(at + np.arange(1, stop - lo + 1, dtype=np.int64) * row)
        at += (stop - lo) * row
        lo, width = stop, width + 1
    layout = np.concatenate(offsets).astype(np.int32)
    layout.flags.writeable = False  # shared by every call with this layout
    for _, index_bytes in groups:
        index_bytes.flags.writeable = False
    return groups, layout
