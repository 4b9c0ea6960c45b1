"""The compacted view of a topic on disk: one immutable file per compaction (Pulsar's compacted ledger).

Pulsar's compactor writes the surviving messages to a BookKeeper ledger of their own and
names it in the ``__compaction`` cursor's ``CompactedTopicLedger`` property. Here that
ledger is a file under ``<data dir>/compacted/<topic dir>/<ledger id>.cmp``::

    header  magic "MGCL" | u16 version | u16 flags (0) | u64 ledger id
    record  u64 ledger id | u64 entry id | u32 length | u32 crc32c(data) | data

Each record keeps the position its entry had in the topic, so a message read from the
compacted view has the id it was published with.

Crash safety comes from the order of three steps, the first and last here: the file is
written under a temporary name, fsynced, renamed and its directory fsynced; only then
does the shell write the cursor that names it (mark-delete position and property in one
store transaction); only after that is the previous file deleted. A crash before the
cursor write leaves the previous view named and intact (the new file is an orphan that
:meth:`CompactedLedgerStorage.sweep` removes at the next load); a crash after it leaves
the new one named (the old file is the orphan).

A file never changes once renamed, so reading it from a worker thread while the event
loop serves reads from the same file is safe: each side uses its own descriptor.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

import google_crc32c

from magnetar.core.positions import Position
from magnetar.storage.interfaces import EntryNotFound, LedgerCorruption
from magnetar.storage.segment_ledger import fsync_dir, topic_dir_name

MAGIC = b"MGCL"
VERSION = 1
#: magic, version, flags, ledger id.
HEADER = struct.Struct(">4sHHQ")
#: ledger id, entry id, data length, crc32c(data).
RECORD = struct.Struct(">QQII")
_FILE = re.compile(r"^(\d{20})\.cmp$")
_WRITE_BUFFER_BYTES = 1 << 20
_SCAN_BLOCK_BYTES = 1 << 20


def file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}.cmp"


class CompactedLedger:
    """One compacted view: its entries by original position, read with ``pread``."""

    def __init__(self, path: Path, ledger_id: int, ledgers: array[int], entries: array[int],
                 offsets: array[int]) -> None:
        self.path = path
        self.ledger_id = ledger_id
        #: the entries' original positions (sorted), and where each record starts
        self._ledgers = ledgers
        self._entries = entries
        self._offsets = offsets
        self._fd: int | None = None

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size

    def _bisect(self, pos: Position, inclusive: bool) -> int:
        """How many entries lie before ``pos`` (at or before it with ``inclusive``)."""
        lo, hi = 0, len(self._offsets)
        while lo < hi:
            mid = (lo + hi) // 2
            here = (self._ledgers[mid], self._entries[mid])
            if here < pos or (inclusive and here == pos):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _position(self, index: int) -> Position:
        return Position(self._ledgers[index], self._entries[index])

    def first_after(self, pos: Position) -> Position | None:
        """The first entry of the view after ``pos``, None when there is none."""
        index = self._bisect(pos, inclusive=True)
        return self._position(index) if index < len(self._offsets) else None

    def last_upto(self, pos: Position) -> Position | None:
        """The last entry of the view at or before ``pos``, None when there is none."""
        index = self._bisect(pos, inclusive=True)
        return self._position(index - 1) if index > 0 else None

    def _index_of(self, pos: Position) -> int | None:
        index = self._bisect(pos, inclusive=False)
        return index if index < len(self._offsets) and self._position(index) == pos else None

    def read(self, pos: Position) -> bytes:
        index = self._index_of(pos)
        if index is None:
            raise EntryNotFound(str(self.path), pos)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        end = self._offsets[index + 1] if index + 1 < len(self._offsets) else self.path.stat().st_size
        start = self._offsets[index]
        record = os.pread(self._fd, end - start, start)
        return _record_data(record, 0, self.path)[2]

    def iter_entries(self) -> Iterator[tuple[Position, bytes]]:
        """Every entry in order, through a descriptor of its own (safe on a worker thread)."""
        with open(self.path, "rb", buffering=_SCAN_BLOCK_BYTES) as file:
            file.seek(HEADER.size)
            for _ in range(len(self._offsets)):
                head = file.read(RECORD.size)
                ledger_id, entry_id, length, crc = RECORD.unpack(head)
                data = file.read(length)
                if len(data) != length or google_crc32c.value(data) != crc:
                    raise LedgerCorruption(f"{self.path}: entry {ledger_id}:{entry_id} fails its checksum")
                yield Position(ledger_id, entry_id), data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _record_data(block: bytes, offset: int, path: Path) -> tuple[Position, int, bytes]:
    if offset + RECORD.size > len(block):
        raise LedgerCorruption(f"{path}: record at {offset} is truncated")
    ledger_id, entry_id, length, crc = RECORD.unpack_from(block, offset)
    start = offset + RECORD.size
    data = block[start:start + length]
    if len(data) != length or google_crc32c.value(data) != crc:
        raise LedgerCorruption(f"{path}: entry {ledger_id}:{entry_id} fails its checksum")
    return Position(ledger_id, entry_id), start + length, data


class CompactedLedgerStorage:
    """Where compacted views live: one directory per topic under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def topic_dir(self, topic: str) -> Path:
        return self.root / topic_dir_name(topic)

    def write(self, topic: str, ledger_id: int, entries: Iterable[tuple[Position, bytes]]) -> CompactedLedger:
        """Write a complete, durable view named ``ledger_id``; entries must come in order."""
        directory = self.topic_dir(topic)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / file_name(ledger_id)
        temporary = path.with_suffix(".tmp")
        ledgers, entry_ids, offsets = array("q"), array("q"), array("q")
        offset = HEADER.size
        last: Position | None = None
        with open(temporary, "wb", buffering=_WRITE_BUFFER_BYTES) as file:
            file.write(HEADER.pack(MAGIC, VERSION, 0, ledger_id))
            for pos, data in entries:
                if last is not None and pos <= last:
                    raise ValueError(f"compacted entries out of order: {pos} after {last}")
                last = pos
                file.write(RECORD.pack(pos.ledger_id, pos.entry_id, len(data), google_crc32c.value(data)))
                file.write(data)
                ledgers.append(pos.ledger_id)
                entry_ids.append(pos.entry_id)
                offsets.append(offset)
                offset += RECORD.size + len(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        fsync_dir(directory)
        return CompactedLedger(path, ledger_id, ledgers, entry_ids, offsets)

    def open(self, topic: str, ledger_id: int) -> CompactedLedger:
        """Load a view's index by reading it once, every checksum checked."""
        path = self.topic_dir(topic) / file_name(ledger_id)
        data = path.read_bytes()
        if len(data) < HEADER.size:
            raise LedgerCorruption(f"{path} is shorter than its header")
        magic, version, _flags, stored_id = HEADER.unpack_from(data, 0)
        if magic != MAGIC or version != VERSION or stored_id != ledger_id:
            raise LedgerCorruption(f"{path} is not compacted ledger {ledger_id} (magic {magic!r}, v{version})")
        ledgers, entry_ids, offsets = array("q"), array("q"), array("q")
        offset = HEADER.size
        while offset < len(data):
            pos, end, _ = _record_data(data, offset, path)
            ledgers.append(pos.ledger_id)
            entry_ids.append(pos.entry_id)
            offsets.append(offset)
            offset = end
        return CompactedLedger(path, ledger_id, ledgers, entry_ids, offsets)

    def delete(self, topic: str, ledger_id: int) -> None:
        path = self.topic_dir(topic) / file_name(ledger_id)
        path.unlink(missing_ok=True)
        if path.parent.exists():
            fsync_dir(path.parent)

    def sweep(self, topic: str, keep: int | None) -> list[Path]:
        """Remove the files of a topic's views other than ``keep`` (orphans of a crash)."""
        directory = self.topic_dir(topic)
        if not directory.is_dir():
            return []
        removed = []
        for path in directory.iterdir():
            match = _FILE.match(path.name)
            if match is None or int(match.group(1)) != keep:
                path.unlink(missing_ok=True)
                removed.append(path)
        if removed:
            fsync_dir(directory)
        return removed

    def delete_topic(self, topic: str) -> None:
        shutil.rmtree(self.topic_dir(topic), ignore_errors=True)
