"""The bucket snapshot: its metadata entry and its segment entries, and their byte encoding.

PIP-195's ``DelayedMessageIndexBucketSnapshotFormat.proto`` in our own compact encoding. A
snapshot is stored as entry 0 (the metadata) followed by entries 1..n (the segments), so
segment entry ids start at 1.

Metadata, per segment: the entry ids it holds as one roaring bitmap per ledger (the portable
serialization Java's RoaringBitmap reads too), and the min and max delivery time in it.
A segment: its delayed indexes sorted by (timestamp, ledger id, entry id).

Encoding (all integers little-endian)::

    metadata := "MDSM" u8 version=1  u32 n_segments  segment_metadata * n_segments
    segment_metadata := i64 min_schedule_ts  i64 max_schedule_ts  u32 n_ledgers
                        ( u64 ledger_id  u32 n_bytes  roaring_bitmap[n_bytes] ) * n_ledgers
    segment := "MDSG" u8 version=1  u32 n  i64 timestamp[n]  u64 ledger_id[n]  u32 entry_id[n]

A segment costs 20 bytes per index; columns keep the encoder and decoder in C (``array``).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from pyroaring import BitMap

from magnetar.core.delayed.triple_long_priority_queue import pack

_METADATA_MAGIC = b"MDSM"
_SEGMENT_MAGIC = b"MDSG"
_VERSION = 1
_HEADER = struct.Struct("<4sBI")
_SEGMENT_METADATA_HEADER = struct.Struct("<qqI")
_LEDGER_HEADER = struct.Struct("<QI")
_BIG_ENDIAN = sys.byteorder == "big"


class SnapshotFormatError(ValueError):
    """Bytes that are not a bucket snapshot of a version this broker reads."""


class DelayedIndex(NamedTuple):
    timestamp: int
    ledger_id: int
    entry_id: int


@dataclass(frozen=True)
class SnapshotSegmentMetadata:
    """What is known about one segment without reading it."""

    delayed_index_bit_map: Mapping[int, BitMap]
    max_schedule_timestamp: int
    min_schedule_timestamp: int

    def number_of_indexes(self) -> int:
        return sum(len(bitmap) for bitmap in self.delayed_index_bit_map.values())


@dataclass(frozen=True)
class SnapshotMetadata:
    metadata_list: tuple[SnapshotSegmentMetadata, ...]


@dataclass(frozen=True)
class SnapshotSegment:
    """Sorted delayed indexes as three parallel columns."""

    timestamps: array[int] = field(default_factory=lambda: array("q"))
    ledger_ids: array[int] = field(default_factory=lambda: array("Q"))
    entry_ids: array[int] = field(default_factory=lambda: array("I"))

    def __len__(self) -> int:
        return len(self.timestamps)

    def indexes(self) -> Iterator[DelayedIndex]:
        return map(DelayedIndex, self.timestamps, self.ledger_ids, self.entry_ids)

    def packed_keys(self) -> Iterator[int]:
        """The indexes as ``triple_long_priority_queue`` keys, in order."""
        return map(pack, self.timestamps, self.ledger_ids, self.entry_ids)

    @classmethod
    def from_indexes(cls, indexes: list[tuple[int, int, int]]) -> SnapshotSegment:
        segment = cls()
        for timestamp, ledger_id, entry_id in indexes:
            segment.timestamps.append(timestamp)
            segment.ledger_ids.append(ledger_id)
            segment.entry_ids.append(entry_id)
        return segment


def _check_header(data: bytes | memoryview, magic: bytes, what: str) -> int:
    if len(data) < _HEADER.size:
        raise SnapshotFormatError(f"bucket snapshot {what} is truncated ({len(data)} bytes)")
    found, version, count = _HEADER.unpack_from(data, 0)
    if found != magic:
        raise SnapshotFormatError(f"not a bucket snapshot {what}: magic {found!r}")
    if version != _VERSION:
        raise SnapshotFormatError(f"bucket snapshot {what} version {version} is not supported")
    return int(count)


def encode_metadata(metadata: SnapshotMetadata) -> bytes:
    parts = [_HEADER.pack(_METADATA_MAGIC, _VERSION, len(metadata.metadata_list))]
    for segment in metadata.metadata_list:
        bitmaps = segment.delayed_index_bit_map
        parts.append(
            _SEGMENT_METADATA_HEADER.pack(segment.min_schedule_timestamp, segment.max_schedule_timestamp, len(bitmaps))
        )
        for ledger_id in sorted(bitmaps):
            payload = bitmaps[ledger_id].serialize()
            parts.append(_LEDGER_HEADER.pack(ledger_id, len(payload)))
            parts.append(payload)
    return b"".join(parts)


def decode_metadata(data: bytes) -> SnapshotMetadata:
    view = memoryview(data)
    count = _check_header(view, _METADATA_MAGIC, "metadata")
    offset = _HEADER.size
    segments: list[SnapshotSegmentMetadata] = []
    try:
        for _ in range(count):
            min_ts, max_ts, n_ledgers = _SEGMENT_METADATA_HEADER.unpack_from(view, offset)
            offset += _SEGMENT_METADATA_HEADER.size
            bitmaps: dict[int, BitMap] = {}
            for _ in range(n_ledgers):
                ledger_id, n_bytes = _LEDGER_HEADER.unpack_from(view, offset)
                offset += _LEDGER_HEADER.size
                if offset + n_bytes > len(view):
                    raise SnapshotFormatError("bucket snapshot metadata is truncated inside a bitmap")
                bitmaps[ledger_id] = BitMap.deserialize(bytes(view[offset : offset + n_bytes]))
                offset += n_bytes
            segments.append(SnapshotSegmentMetadata(bitmaps, max_ts, min_ts))
    except (struct.error, ValueError) as exc:
        if isinstance(exc, SnapshotFormatError):
            raise
        raise SnapshotFormatError(f"bucket snapshot metadata is malformed: {exc}") from exc
    if offset != len(view):
        raise SnapshotFormatError(f"bucket snapshot metadata has {len(view) - offset} trailing bytes")
    return SnapshotMetadata(tuple(segments))


def _column_bytes(column: array[int]) -> bytes:
    if _BIG_ENDIAN:
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def snapshot_entries(metadata: SnapshotMetadata, segments: Iterable[SnapshotSegment]) -> list[bytes]:
    """A snapshot as it is stored: the metadata at entry 0, segment ``i`` at entry ``i``."""
    return [encode_metadata(metadata), *map(encode_segment, segments)]


def encode_segment(segment: SnapshotSegment) -> bytes:
    return b"".join(
        (
            _HEADER.pack(_SEGMENT_MAGIC, _VERSION, len(segment)),
            _column_bytes(segment.timestamps),
            _column_bytes(segment.ledger_ids),
            _column_bytes(segment.entry_ids),
        )
    )


def decode_segment(data: bytes) -> SnapshotSegment:
    count = _check_header(data, _SEGMENT_MAGIC, "segment")
    expected = _HEADER.size + count * 20
    if len(data) != expected:
        raise SnapshotFormatError(f"bucket snapshot segment of {count} indexes has {len(data)} bytes")
    segment = SnapshotSegment()
    offset = _HEADER.size
    for column, width in ((segment.timestamps, 8), (segment.ledger_ids, 8), (segment.entry_ids, 4)):
        if column.itemsize != width:
            raise SnapshotFormatError(f"array typecode {column.typecode!r} is not {width} bytes here")
        column.frombytes(data[offset : offset + count * width])
        if _BIG_ENDIAN:
            column.byteswap()
        offset += count * width
    return segment
