"""The managed ledger on disk: one append-only segment file per ledger.

Corresponds to Pulsar's ``ManagedLedgerImpl`` over BookKeeper ledgers, folded into local
files. A topic owns a directory under the data directory (its name encoded by
:func:`topic_dir_name`); each ledger is a file named by its zero-padded ledger id::

    header  magic "MGSG" | u16 version | u16 flags (0) | u64 ledger id | u64 created ms
    record  u32 length | u32 crc32c(data) | data        (big-endian, repeated)

Appends are buffered (readable at once from the tail cache) and written by
:meth:`SegmentLedger.flush` with one ``writev`` for all of them: the broker flushes each
ledger once per event-loop turn, so a turn that received a thousand SENDs makes one
system call, not a thousand. A flushed entry is durable once :meth:`SegmentLedger.sync`
has ``fdatasync``-ed its file, and, for a new file, the directory. ``sync`` runs on the
group-commit worker: it swaps out the set of files with unsynced writes under a lock and
syncs private duplicates of their descriptors, so the owner thread may keep appending,
roll over, trim or close meanwhile. A write that fails is cut off the file and its
entries are taken back (:class:`AppendFailed`), so the ledger never has a hole.

The ledger list is the set of segment files, not a list in the metadata store. Ids come
from the store's durable counter, so a deleted ledger's id is never reused, and a
deletion is made durable by syncing the directory. Keeping a second list would only add
a crash window in which it and the files disagree. A cluster's broker is the exception:
brokers share the files, and the list that counts is the one in the metadata store
(:mod:`magnetar.storage.recorded_ledgers`).

Opening a topic scans its files: a torn or corrupt tail (short record, bad checksum) is
cut back to the last good record with a warning, files left empty are removed, and the
recovered files are synced so nothing exposed after a restart can vanish later. Appends
then go to a new ledger, never after a recovered tail.

Scanning checks every record, about a quarter of a microsecond each in C but a few in
Python: ten million entries would take tens of seconds. So a ledger that is complete
(rolled over) and synced gets an index file beside it (``<id>.idx``: its record offsets
with a checksum), written by the sync that made its last record durable; opening loads
that index instead of walking the file, after checking it matches the file (same length,
valid header and last record). Only ledgers without a matching index, normally the one
being written at the crash, are scanned; any later damage inside a sealed ledger is still
caught by the checksum of the entry when it is read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import struct
import sys
import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import google_crc32c

from magnetar.core.positions import Position
from magnetar.storage.descriptor_budget import DescriptorBudget
from magnetar.storage.entry_cache_budget import EntryCacheBudget
from magnetar.storage.interfaces import (
    AppendFailed,
    EntryNotFound,
    LedgerConfig,
    LedgerCorruption,
    StorageError,
)
from magnetar.storage.ledger_index import IndexedLedger, LedgerIndex, appendable, is_full, wall_clock_ms
from magnetar.storage.recorded_ledgers import RecordedLedgers

log = logging.getLogger("magnetar.storage")

SEGMENT_MAGIC = b"MGSG"
SEGMENT_VERSION = 1
#: magic, version, flags, ledger id, creation time (ms).
HEADER = struct.Struct(">4sHHQQ")
#: data length, crc32c(data).
RECORD = struct.Struct(">II")
INDEX_MAGIC = b"MGIX"
INDEX_VERSION = 1
#: magic, version, flags, ledger id, entry count, end of the last record, crc32c(offsets).
INDEX_HEADER = struct.Struct(">4sHHQQQI")

_SEGMENT_FILE = re.compile(r"^(\d{20})\.seg$")
_INDEX_FILE = re.compile(r"^(\d{20})\.idx$")
#: Buffered appends are written once they reach this size, whatever the turn.
_FLUSH_BYTES = 1 << 20
#: writev takes at most IOV_MAX (1024 on Linux) buffers; each entry needs two.
_IOV_MAX = 1024
#: Descriptors kept open for reading closed ledgers (readers mostly go sequentially).
_READ_FDS_MAX = 4
#: How much of a segment file :meth:`SegmentLedger.iter_entries` reads at once.
_SCAN_BLOCK_BYTES = 1 << 20
#: Longest directory name we produce; file systems allow 255 bytes.
_DIR_NAME_MAX = 200
_SAFE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def topic_dir_name(topic: str) -> str:
    """A file-system-safe, injective directory name for a topic.

    Bytes other than ASCII letters, digits, ``-`` and ``_`` become ``%XX``; a name that
    would be too long keeps a readable prefix and ends in a SHA-256 digest of the topic.
    """
    raw = topic.encode()
    if not raw:
        raise ValueError("a topic name must not be empty")
    name = "".join(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in raw)
    if len(name) > _DIR_NAME_MAX:
        digest = hashlib.sha256(raw).hexdigest()[:32]
        name = f"{name[: _DIR_NAME_MAX - len(digest) - 1]}~{digest}"
    return name


def segment_file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}.seg"


def index_file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}.idx"


@dataclass
class SegmentScan:
    """What a segment file holds up to its last good record."""

    ledger_id: int
    timestamp_ms: int
    #: File offset of each good record.
    offsets: array[int]
    #: End of the last good record; the file is cut back to here.
    good_end: int
    file_size: int
    #: Sum of the good records' data lengths.
    size_bytes: int
    #: Well-formed records found after the first bad one (a sign of damage, not of a crash).
    intact_after: int


def _valid_record_length(f: BinaryIO, offset: int, file_size: int) -> int | None:
    """The data length of the record at the file's current offset, None if it is not whole and valid."""
    head = f.read(RECORD.size)
    if len(head) < RECORD.size:
        return None
    length, crc = RECORD.unpack(head)
    if length == 0 or offset + RECORD.size + length > file_size:
        return None
    data = f.read(length)
    if len(data) != length or google_crc32c.value(data) != crc:
        return None
    return length


def _count_intact_after(f: BinaryIO, bad_offset: int, file_size: int) -> int:
    """How many valid records follow the bad one, trusting its length field."""
    f.seek(bad_offset)
    head = f.read(RECORD.size)
    if len(head) < RECORD.size:
        return 0
    offset = bad_offset + RECORD.size + RECORD.unpack(head)[0]
    count = 0
    while offset < file_size:
        f.seek(offset)
        length = _valid_record_length(f, offset, file_size)
        if length is None:
            break
        count += 1
        offset += RECORD.size + length
    return count


def scan_segment(path: Path, ledger_id: int) -> SegmentScan | None:
    """Read a segment file's header and records; None if not even the header was written.

    Raises :class:`LedgerCorruption` when the header is complete but wrong, which no crash
    produces.
    """
    with open(path, "rb", buffering=1 << 20) as f:
        file_size = os.fstat(f.fileno()).st_size
        raw = f.read(HEADER.size)
        if len(raw) < HEADER.size:
            return None
        magic, version, _flags, stored_id, created_ms = HEADER.unpack(raw)
        if (magic, version, stored_id) != (SEGMENT_MAGIC, SEGMENT_VERSION, ledger_id):
            if not raw.strip(b"\0") and not f.read().strip(b"\0"):
                return None
            raise LedgerCorruption(
                f"{path} is not segment file version {SEGMENT_VERSION} of ledger {ledger_id} "
                f"(magic {magic!r}, version {version}, ledger {stored_id}); move it aside to open the topic"
            )
        offsets: array[int] = array("Q")
        offset, size_bytes = _scan_records(f.fileno(), HEADER.size, file_size, offsets)
        intact_after = _count_intact_after(f, offset, file_size) if offset < file_size else 0
    return SegmentScan(ledger_id, created_ms, offsets, offset, file_size, size_bytes, intact_after)


def _scan_records(fd: int, offset: int, file_size: int, offsets: array[int]) -> tuple[int, int]:
    """Collect the offsets of the whole, valid records from ``offset`` on, reading large blocks.

    Returns the end of the last good record and the sum of the good records' data
    lengths. Opening a topic after a crash walks every record of every file, so this
    loop is a large part of restart time: one ``pread`` per block, not two reads per record.
    """
    unpack, crc32c = RECORD.unpack_from, google_crc32c.value
    size_bytes = 0
    block, block_start = b"", offset
    while offset < file_size:
        at = offset - block_start
        if at + RECORD.size > len(block):
            block, block_start, at = os.pread(fd, max(_SCAN_BLOCK_BYTES, RECORD.size), offset), offset, 0
            if len(block) < RECORD.size:
                break
        length, crc = unpack(block, at)
        if length == 0 or offset + RECORD.size + length > file_size:
            break
        end = at + RECORD.size + length
        if end > len(block):
            block = os.pread(fd, max(_SCAN_BLOCK_BYTES, RECORD.size + length), offset)
            block_start, at, end = offset, 0, RECORD.size + length
            if end > len(block):
                break
        if crc32c(block[at + RECORD.size : end]) != crc:
            break
        offsets.append(offset)
        size_bytes += length
        offset += RECORD.size + length
    return offset, size_bytes


def write_segment_index(segment_path: Path, ledger_id: int, offsets: array[int], end_offset: int) -> None:
    """Write a complete, durable ledger's offsets beside it. Not synced: an index lost or
    torn by a crash fails its checks and the file is scanned instead."""
    body = array("Q", offsets)
    if sys.byteorder == "little":
        body.byteswap()
    data = body.tobytes()
    header = INDEX_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, 0, ledger_id, len(offsets), end_offset,
                               google_crc32c.value(data))
    path = segment_path.with_name(index_file_name(ledger_id))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header + data)
    os.replace(tmp, path)


def load_segment_index(segment_path: Path, ledger_id: int) -> SegmentScan | None:
    """The scan result a valid index file gives for a segment, or None (then scan it)."""
    try:
        with open(segment_path.with_name(index_file_name(ledger_id)), "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if len(raw) < INDEX_HEADER.size:
        return None
    magic, version, _flags, stored_id, count, end_offset, crc = INDEX_HEADER.unpack_from(raw)
    data = raw[INDEX_HEADER.size:]
    if ((magic, version, stored_id) != (INDEX_MAGIC, INDEX_VERSION, ledger_id) or not count
            or len(data) != 8 * count or google_crc32c.value(data) != crc):
        return None
    offsets = array("Q")
    offsets.frombytes(data)
    if sys.byteorder == "little":
        offsets.byteswap()
    try:
        with open(segment_path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            head = f.read(HEADER.size)
            if file_size != end_offset or len(head) < HEADER.size:
                return None
            magic, version, _flags, stored_id, created_ms = HEADER.unpack(head)
            if (magic, version, stored_id) != (SEGMENT_MAGIC, SEGMENT_VERSION, ledger_id):
                return None
            last = offsets[-1]
            f.seek(last)
            if _valid_record_length(f, last, file_size) is None or f.tell() != end_offset:
                return None
    except OSError:
        return None
    size_bytes = end_offset - HEADER.size - RECORD.size * count
    return SegmentScan(ledger_id, created_ms, offsets, end_offset, file_size, size_bytes, 0)


def recover_segment(path: Path, ledger_id: int) -> SegmentScan | None:
    """Scan a segment file and cut off a torn or corrupt tail, logging what was dropped."""
    scan = scan_segment(path, ledger_id)
    if scan is None:
        if path.stat().st_size:
            log.warning("dropping %s: its header is incomplete (torn while the file was created)", path)
        return None
    if scan.good_end < scan.file_size:
        dropped = scan.file_size - scan.good_end
        if scan.intact_after:
            log.error(
                "%s: bad record at offset %d followed by %d intact records; truncating %d bytes "
                "after entry %d (this looks like disk damage, not a crash)",
                path,
                scan.good_end,
                scan.intact_after,
                dropped,
                len(scan.offsets) - 1,
            )
        else:
            log.warning(
                "%s: torn or corrupt tail at offset %d; truncating %d bytes, keeping %d entries",
                path,
                scan.good_end,
                dropped,
                len(scan.offsets),
            )
        os.truncate(path, scan.good_end)
    return scan


def bounded_scan(scan: SegmentScan, entries: int, path: Path) -> SegmentScan:
    """What of a scanned segment its ledger list keeps: its first ``entries`` records.
    Records after them were written by a writer that was fenced meanwhile and never
    acknowledged; they stay in the file and are never read."""
    count = len(scan.offsets)
    if entries >= count:
        if entries > count:
            log.error("%s holds %d entries, fewer than the %d its ledger list closed it at", path, count, entries)
        return scan
    end = scan.offsets[entries]
    size_bytes = end - HEADER.size - RECORD.size * entries
    return SegmentScan(scan.ledger_id, scan.timestamp_ms, scan.offsets[:entries], end, scan.file_size, size_bytes, 0)


def fsync_dir(path: Path) -> None:
    """Make a file's creation or removal in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Segment:
    """Where each entry of one ledger lies in its file."""

    __slots__ = ("ledger_id", "path", "offsets", "end_offset")

    def __init__(self, ledger_id: int, path: Path, offsets: array[int], end_offset: int) -> None:
        self.ledger_id = ledger_id
        self.path = path
        self.offsets = offsets
        self.end_offset = end_offset

    def span(self, entry_id: int) -> tuple[int, int]:
        """Offset and length (header included) of an entry's record."""
        start = self.offsets[entry_id]
        stop = self.offsets[entry_id + 1] if entry_id + 1 < len(self.offsets) else self.end_offset
        return start, stop - start


@dataclass(frozen=True)
class _SegmentSpan:
    """Consecutive records of one segment file: where the first starts, how many."""

    path: Path
    ledger_id: int
    first_entry: int
    offset: int
    count: int

    def __iter__(self) -> Iterator[tuple[Position, bytes]]:
        try:
            file = open(self.path, "rb", buffering=_SCAN_BLOCK_BYTES)
        except FileNotFoundError:
            raise StorageError(f"ledger {self.ledger_id} ({self.path}) was deleted while being read") from None
        with file:
            file.seek(self.offset)
            for entry_id in range(self.first_entry, self.first_entry + self.count):
                head = file.read(RECORD.size)
                if len(head) != RECORD.size:
                    raise LedgerCorruption(f"{self.path} ends before entry {entry_id}")
                length, crc = RECORD.unpack(head)
                data = file.read(length)
                if len(data) != length or google_crc32c.value(data) != crc:
                    raise LedgerCorruption(f"entry {self.ledger_id}:{entry_id} in {self.path} fails its checksum")
                yield Position(self.ledger_id, entry_id), data


@dataclass(frozen=True)
class _DetachedScan:
    """Spans of segment files read through descriptors of their own (any thread)."""

    spans: list[_SegmentSpan]

    def __iter__(self) -> Iterator[tuple[Position, bytes]]:
        for span in self.spans:
            yield from span


#: data leaves the page cache in steps of at least this much (one call per step)
_PAGE_CACHE_STEP_BYTES = 16 * 1024 * 1024


class _TailCache:
    """The most recently appended entries, so tailing consumers never touch the disk.
    Bounded per ledger, and across ledgers by the broker's :class:`EntryCacheBudget`."""

    def __init__(self, max_entries: int, max_bytes: int, budget: EntryCacheBudget | None = None) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._budget = budget
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self._bytes = 0
        self._release_lock = threading.Lock()
        #: the cached entry at a position, or None (the dict's own method: every dispatched
        #: entry is looked up here)
        self.get: Callable[[Position], bytes | None] = self._entries.get

    def put_all(self, positions: Sequence[Position], entries: Sequence[bytes]) -> None:
        """Cache appended entries (``entries`` may run on past the positions)."""
        if not self._max_entries:
            return
        cached, max_bytes = self._entries, self._max_bytes
        added = 0
        for pos, data in zip(positions, entries, strict=False):
            if len(data) <= max_bytes:
                cached[pos] = data
                added += len(data)
        self._bytes += added
        freed = 0
        budget = self._budget
        if budget is not None and added:
            budget.added(self, added)
            budget.make_room(self)
            excess = budget.used_bytes - budget.limit_bytes
            while cached and freed < excess:
                freed += self._evict_oldest()
        while len(cached) > self._max_entries or self._bytes > max_bytes:
            freed += self._evict_oldest()
        self._released(freed)

    def drop_ledgers(self, ledger_ids: set[int]) -> None:
        """Forget trimmed ledgers; entries are in position order, so theirs come first."""
        freed = 0
        while self._entries and next(iter(self._entries)).ledger_id in ledger_ids:
            freed += self._evict_oldest()
        self._released(freed)

    def drop_from(self, pos: Position) -> None:
        """Forget the entries at and after ``pos`` (appends taken back)."""
        freed = 0
        while self._entries and next(reversed(self._entries)) >= pos:
            data = self._entries.popitem(last=True)[1]
            self._bytes -= len(data)
            freed += len(data)
        self._released(freed)

    def release_all(self) -> None:
        """Drop everything. The budget may ask for this on the loop while the ledger closes
        on a worker thread, so the bytes are taken under a lock and counted once."""
        with self._release_lock:
            freed, self._bytes = self._bytes, 0
            self._entries.clear()
        self._released(freed)

    def _evict_oldest(self) -> int:
        """Drop the oldest entry; its size, for the budget (told once per change)."""
        _, data = self._entries.popitem(last=False)
        self._bytes -= len(data)
        return len(data)

    def _released(self, size: int) -> None:
        if size and self._budget is not None:
            self._budget.released(self, size, not self._entries)


class SegmentLedger(IndexedLedger):
    """A managed ledger in segment files (see :class:`~magnetar.storage.interfaces.ManagedLedger`)."""

    def __init__(
        self,
        data_dir: Path | str,
        name: str,
        allocate_ledger_id: Callable[[], int],
        config: LedgerConfig | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        budget: DescriptorBudget | None = None,
        first_ledger_id: int | None = None,
        cache_budget: EntryCacheBudget | None = None,
        recorded: RecordedLedgers | None = None,
    ) -> None:
        """``first_ledger_id``: the id of the first ledger this one opens, taken beforehand
        (then ``allocate_ledger_id`` gives the ones after it); ``cache_budget``: the limit
        its tail cache shares with every other ledger's; ``recorded``: a cluster's ledger
        list in the metadata store (:mod:`magnetar.storage.recorded_ledgers`), which then
        decides which files are the topic's and up to which entry."""
        self.name = name
        self._recorded = recorded
        #: rollovers not yet recorded in ``recorded``: (closed id, its entries, new id, kept ids)
        self._rolls: list[tuple[int, int, int, tuple[int, ...]]] = []
        self._budget = budget
        self.directory = Path(data_dir) / topic_dir_name(name)
        self._allocate = allocate_ledger_id
        self._first_ledger_id = first_ledger_id
        self._config = config or LedgerConfig()
        self._clock_ms = clock_ms
        self._index = LedgerIndex()
        self._segments: dict[int, _Segment] = {}
        self._cache = _TailCache(self._config.cache_max_entries, self._config.cache_max_bytes, cache_budget)
        self._write_fd = -1
        #: a current segment exists (its descriptor may have been given back to the budget)
        self._writing = False
        self._fd_lock = threading.Lock()
        #: record headers and entries appended since the last flush, in file order
        self._unwritten: list[bytes] = []
        self._unwritten_bytes = 0
        #: the first buffered entry's position (None: nothing buffered)
        self._unwritten_from: Position | None = None
        #: the last entry appended, written or not
        self._appended: Position | None = None
        self._read_fds: OrderedDict[int, int] = OrderedDict()
        self._closed = False
        self._sync_mutex = threading.Lock()
        #: ledger id -> how much of its segment left the page cache (the syncing thread's)
        self._left_page_cache: dict[int, int] = {}
        # Shared with the sync worker; everything below is guarded by _lock.
        self._lock = threading.Lock()
        self._dirty: dict[int, int] = {}  # ledger id -> private dup of its descriptor
        #: ledgers rolled over since the last sync: that sync writes their index files
        self._sealed: list[_Segment] = []
        #: segment files of detached ledgers, oldest first, waiting for remove_detached()
        self._detached: list[Path] = []
        #: a descriptor of the directory, taken when an entry in it was created or removed;
        #: the sync fsyncs it, so syncing never needs a new descriptor
        self._dir_fd = -1
        #: a descriptor of the parent directory while a new ledger's own directory entry is
        #: not yet durable: the first sync (on the committer's thread) fsyncs it, not open()
        self._parent_fd = -1
        self._fault: Exception | None = None
        #: sync() calls that had something to make durable.
        self.sync_count = 0
        #: fsync/fdatasync system calls made by sync().
        self.fsync_count = 0

        try:
            if not self.directory.is_dir():
                self.directory.mkdir(parents=True)
                self._parent_fd = os.open(self.directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._recover()
            self._last_appended = self._synced = self._appended = self._index.last_position()
            self._open_ledger()
        except BaseException:
            self._release()  # a ledger that failed to open (out of descriptors, say) holds none
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ledger_list(self) -> RecordedLedgers | None:
        """The cluster's ledger list this ledger records its changes in (None: standalone)."""
        return self._recorded

    # -- opening ----------------------------------------------------------------------

    def _recover(self) -> None:
        removed = False
        recorded = None if self._recorded is None else self._recorded.recorded
        names = sorted(path.name for path in self.directory.iterdir())
        segments = {name for name in names if _SEGMENT_FILE.match(name)}
        for name in names:
            match = _INDEX_FILE.match(name)
            if match is not None and segment_file_name(int(match.group(1))) not in segments:
                (self.directory / name).unlink(missing_ok=True)  # its ledger was trimmed
        for name in sorted(segments):
            path = self.directory / name
            ledger_id = int(name[:-4])
            if recorded is not None and ledger_id not in recorded:
                continue  # not in the store's list: a fenced writer's, never acknowledged
            scan = load_segment_index(path, ledger_id)
            indexed = scan is not None
            if scan is None:
                scan = recover_segment(path, ledger_id)
            if recorded is not None and scan is not None:
                scan = bounded_scan(scan, recorded[ledger_id], path)
                if not scan.offsets:
                    continue  # closed empty: its file may still be written by a fenced writer
            if scan is None or not scan.offsets:
                path.unlink()
                path.with_name(index_file_name(ledger_id)).unlink(missing_ok=True)
                removed = True
                continue
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if not indexed:
                # checked and synced: appends go to a new ledger, so this one is complete
                self._write_index(ledger_id, path, scan.offsets, scan.good_end)
            self._segments[ledger_id] = _Segment(ledger_id, path, scan.offsets, scan.good_end)
            self._index.add_ledger(ledger_id, scan.timestamp_ms, len(scan.offsets), scan.size_bytes)
        if removed:
            fsync_dir(self.directory)

    def _write_index(self, ledger_id: int, path: Path, offsets: array[int], end_offset: int) -> None:
        try:
            write_segment_index(path, ledger_id, offsets, end_offset)
        except OSError as exc:
            log.debug("no index file for %s (it will be scanned at the next open): %s", path, exc)

    def _open_ledger(self) -> None:
        """Create the next ledger's file and make it current."""
        ledger_id, self._first_ledger_id = self._first_ledger_id, None
        if ledger_id is None:
            ledger_id = self._allocate()
        timestamp_ms = self._clock_ms()
        if len(self._index) and ledger_id <= self._index.current.ledger_id:
            raise StorageError(
                f"ledger id {ledger_id} for {self.name!r} does not follow {self._index.current.ledger_id}: "
                "the ledger id counter went backwards"
            )
        path = self.directory / segment_file_name(ledger_id)
        try:
            self._hold_dir_fd()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create ledger file {path} for {self.name!r}: {exc}") from exc
        header = HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, 0, ledger_id, timestamp_ms)
        try:
            if os.write(fd, header) != len(header):
                raise OSError("short write")
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise StorageError(f"cannot write ledger file {path} for {self.name!r}: {exc}") from exc
        if self._writing:
            self.flush()
            sealed = self._segments.get(self._index.current.ledger_id)
            self._retire_write_fd()
            if sealed is not None and sealed.offsets:
                with self._lock:
                    self._sealed.append(sealed)
            if self._recorded is not None:
                current = self._index.current
                with self._lock:
                    self._rolls.append((current.ledger_id, current.entries, ledger_id, tuple(self._segments)))
        self._write_fd = fd
        self._writing = True
        self._segments[ledger_id] = _Segment(ledger_id, path, array("Q"), HEADER.size)
        self._index.add_ledger(ledger_id, timestamp_ms)
        with self._lock:
            self._dirty[ledger_id] = os.dup(fd)
        if self._budget is not None:  # last: from here on, giving the descriptor back is safe
            self._budget.touch(self)

    def _hold_dir_fd(self) -> None:
        """Take the directory's descriptor for the next sync (one at a time)."""
        with self._lock:
            if self._dir_fd >= 0:
                return
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with self._lock:
            if self._dir_fd < 0:
                self._dir_fd, fd = fd, -1
        if fd >= 0:
            os.close(fd)

    def _retire_write_fd(self) -> None:
        """Keep the closed ledger's descriptor for reads of its entries."""
        if self._write_fd >= 0:
            self._cache_read_fd(self._index.current.ledger_id, self._write_fd)
        self._write_fd = -1

    def _wfd(self) -> int:
        """The current segment's descriptor, reopened if it was given back."""
        if self._write_fd < 0:
            path = self._segments[self._index.current.ledger_id].path
            self._write_fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        if self._budget is not None:
            self._budget.touch(self)
        return self._write_fd

    def drop_descriptors(self) -> bool:
        """Give every descriptor back to the budget; reopened on the next use."""
        with self._fd_lock:
            if self._unwritten_from is not None or self._closed:
                return self._closed
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1
            while self._read_fds:
                os.close(self._read_fds.popitem()[1])
            return True

    def _cache_read_fd(self, ledger_id: int, fd: int) -> None:
        self._read_fds[ledger_id] = fd
        while len(self._read_fds) > _READ_FDS_MAX:
            os.close(self._read_fds.popitem(last=False)[1])

    # -- appending and syncing --------------------------------------------------------

    def _check_writable(self) -> None:
        self._check_open()
        if self._fault is not None:
            raise StorageError(
                f"managed ledger {self.name!r} stopped accepting writes after a failed fsync "
                f"({self._fault}); close and reopen the topic"
            )

    def append(self, data: bytes) -> Position:
        return self.append_many((data,))[0]

    def append_many(self, entries: Sequence[bytes]) -> list[Position]:
        self._check_writable()
        if self._unwritten_bytes >= _FLUSH_BYTES or len(self._unwritten) >= _IOV_MAX:
            self.flush()
        if is_full(self._index.current, self._config):
            self._open_ledger()  # flushes what the full ledger still buffers
        count, size_bytes = appendable(self.name, self._index.current, self._config, entries)
        first = self._index.record_append(size_bytes, count)
        ledger_id, entry_id = first
        segment = self._segments[ledger_id]
        offsets, end_offset, unwritten = segment.offsets, segment.end_offset, self._unwritten
        crc32c_value = google_crc32c.value
        positions = []
        for data in entries[:count] if count < len(entries) else entries:
            unwritten += (RECORD.pack(len(data), crc32c_value(data)), data)
            offsets.append(end_offset)
            end_offset += RECORD.size + len(data)
            positions.append(Position(ledger_id, entry_id))
            entry_id += 1
        segment.end_offset = end_offset
        self._unwritten_bytes += RECORD.size * count + size_bytes
        if self._unwritten_from is None:
            self._unwritten_from = first
        self._appended = positions[-1]
        self._cache.put_all(positions, entries)
        if is_full(self._index.current, self._config):
            self._roll_over_after_append()
        return positions

    def _roll_over_after_append(self) -> None:
        """Open the next ledger (writing this one's buffer first); if the new file cannot
        be made, keep appending here and retry at the next append."""
        self.flush()
        try:
            self._open_ledger()
        except Exception as exc:
            log.warning("managed ledger %r: rollover failed, retrying at the next append: %s", self.name, exc)

    def flush(self) -> None:
        first = self._unwritten_from
        if first is None:
            return
        self._check_open()
        chunks, expected = self._unwritten, self._unwritten_bytes
        self._unwritten, self._unwritten_bytes, self._unwritten_from = [], 0, None
        segment = self._segments[first.ledger_id]
        start = segment.offsets[first.entry_id]
        with self._fd_lock:
            with self._lock:
                needs_fd = segment.ledger_id not in self._dirty
            try:
                # the file's descriptor and the sync's own, taken first: running out of them
                # fails these appends before anything is written, rather than after
                fd = self._wfd()
                sync_fd = os.dup(fd) if needs_fd else -1
            except OSError as exc:  # nothing was written: nothing to cut back
                self._take_back(segment, first, start, written=False)
                raise AppendFailed(self.name, first, str(exc)) from exc
            error = self._write_all(fd, chunks, expected)
            if error is not None:
                if sync_fd >= 0:
                    os.close(sync_fd)
                self._take_back(segment, first, start)
                raise AppendFailed(self.name, first, error)
            with self._lock:
                self._last_appended = self._appended
                if sync_fd >= 0:
                    if segment.ledger_id in self._dirty:
                        os.close(sync_fd)
                    else:
                        self._dirty[segment.ledger_id] = sync_fd

    def _write_all(self, fd: int, chunks: list[bytes], expected: int) -> str | None:
        """Write the chunks in as few system calls as writev allows; the error, if any."""
        written = 0
        try:
            for i in range(0, len(chunks), _IOV_MAX):
                group = chunks[i:i + _IOV_MAX]
                done = os.writev(fd, group)
                written += done
                if done < sum(map(len, group)):
                    # a short write: write the rest, which fails with the reason (ENOSPC)
                    # or succeeds if the shortfall was passing
                    rest = b"".join(group)[done:]
                    while rest:
                        n = os.write(fd, rest)
                        if n == 0:
                            break
                        written += n
                        rest = rest[n:]
        except OSError as exc:
            return str(exc)
        return None if written == expected else f"short write ({written} of {expected} bytes)"

    def _take_back(self, segment: _Segment, first: Position, start: int, written: bool = True) -> None:
        """Cut the file back to before ``first`` (if anything was written) and forget the
        entries from it on."""
        try:
            if written:
                os.ftruncate(self._wfd(), start)
        except OSError as exc:
            with self._lock:
                self._fault = exc
        dropped = len(segment.offsets) - first.entry_id
        dropped_bytes = segment.end_offset - start - dropped * RECORD.size
        del segment.offsets[first.entry_id:]
        segment.end_offset = start
        self._index.take_back(dropped, dropped_bytes)
        self._cache.drop_from(first)
        self._appended = self._index.last_position()

    def unsynced(self) -> bool:
        with self._lock:
            return bool(self._dirty) or self._dir_fd >= 0 or self._parent_fd >= 0

    def sync(self) -> Position | None:
        # One sync at a time, so the position returned never claims data that another
        # thread's sync is still flushing.
        with self._sync_mutex:
            return self._sync()

    def _sync(self) -> Position | None:
        with self._lock:
            fds, self._dirty = self._dirty, {}
            dir_fd, self._dir_fd = self._dir_fd, -1
            parent_fd, self._parent_fd = self._parent_fd, -1
            covered, fault = self._last_appended, self._fault
            # every append to these happened before the swap above: this sync covers them
            sealed, self._sealed = self._sealed, []
            rolls, self._rolls = self._rolls, []
            written = {ledger_id: segment.end_offset for ledger_id in fds
                       if (segment := self._segments.get(ledger_id)) is not None}
        try:
            if fault is not None:
                raise StorageError(f"managed ledger {self.name!r} cannot sync after a failure: {fault}")
            for fd in fds.values():
                os.fdatasync(fd)
            for held in (dir_fd, parent_fd):
                if held >= 0:
                    os.fsync(held)
            for ledger_id, end in written.items():
                self._leave_page_cache(ledger_id, fds[ledger_id], end)
        except OSError as exc:
            with self._lock:
                self._fault = exc
            raise StorageError(f"fsync failed for {self.name!r} in {self.directory}: {exc}") from exc
        finally:
            for fd in (*fds.values(), dir_fd, parent_fd):
                if fd >= 0:
                    os.close(fd)
        for segment in sealed:
            self._write_index(segment.ledger_id, segment.path, segment.offsets, segment.end_offset)
        if rolls:
            self._record_rolls(rolls)
        with self._lock:
            if fds or dir_fd >= 0 or parent_fd >= 0:
                self.sync_count += 1
                self.fsync_count += len(fds) + (dir_fd >= 0) + (parent_fd >= 0)
            if covered is not None and (self._synced is None or covered > self._synced):
                self._synced = covered
            return self._synced

    def _record_rolls(self, rolls: list[tuple[int, int, int, tuple[int, ...]]]) -> None:
        """A cluster's ledger: its rollovers are in the store's list before an entry of the
        new ledger is reported durable. One that cannot be recorded stops the writes, as a
        failed fsync does: the topic is unloaded and its next owner reads the list."""
        assert self._recorded is not None
        try:
            for roll in rolls:
                self._recorded.rolled(*roll)
        except Exception as exc:
            with self._lock:
                self._fault = exc
            raise StorageError(f"managed ledger {self.name!r}: its rollover could not be recorded: {exc}") from exc

    def _leave_page_cache(self, ledger_id: int, fd: int, synced_end: int) -> None:
        """Synced data more than the window behind the end leaves the page cache, as a
        bookie's journal does (``journalRemoveFromPageCache``). A segment grows by as much as
        is published, and every new page of the OS page cache costs a first touch: on a
        virtual machine whose host takes freed memory back, a sustained 200 MB/s of batched
        publishing spent most of the broker's time there, where pages given back as the data
        is synced are taken again at once. Readers further behind than the window read
        from the disk. Runs on the syncing thread; a hint, so an error is ignored."""
        window = self._config.page_cache_window_bytes
        if window is None:
            return
        start = self._left_page_cache.get(ledger_id, 0)
        stop = synced_end - window
        if stop - start < _PAGE_CACHE_STEP_BYTES:
            return
        try:
            os.posix_fadvise(fd, start, stop - start, os.POSIX_FADV_DONTNEED)
        except OSError:
            return
        self._left_page_cache[ledger_id] = stop
        for gone in [other for other in self._left_page_cache if other not in self._segments]:
            del self._left_page_cache[gone]

    # -- reading ----------------------------------------------------------------------

    def read(self, pos: Position) -> bytes:
        cached = self._cache.get(pos)  # held only while open, stored and not trimmed
        if cached is not None:
            return cached
        self._check_open()
        if not self._index.contains(pos):
            raise EntryNotFound(self.name, pos)
        if self._unwritten_from is not None and pos >= self._unwritten_from:
            self.flush()  # not in the cache (too large for it): read it from the file
        segment = self._segments[pos.ledger_id]
        offset, length = segment.span(pos.entry_id)
        raw = os.pread(self._read_fd(pos.ledger_id), length, offset)
        data = raw[RECORD.size :]
        if len(raw) != length or RECORD.unpack_from(raw) != (len(data), google_crc32c.value(data)):
            raise LedgerCorruption(f"entry {pos} of {self.name!r} in {segment.path} fails its checksum")
        return data

    def iter_entries(self, after: Position) -> Iterator[tuple[Position, bytes]]:
        """Every entry after ``after``, checksums checked, reading each file in large blocks.

        Covers the ledgers that exist when the iteration starts, each up to its end as
        seen when its next block is read; a ledger trimmed meanwhile is skipped from
        there on.
        """
        self._check_open()
        self.flush()
        for info in self._index.ledgers():
            if info.ledger_id < after.ledger_id:
                continue
            first = after.entry_id + 1 if info.ledger_id == after.ledger_id else 0
            yield from self._iter_segment(info.ledger_id, max(first, 0))

    def _iter_segment(self, ledger_id: int, entry_id: int) -> Iterator[tuple[Position, bytes]]:
        unpack, crc32c = RECORD.unpack_from, google_crc32c.value
        while not self._closed and ledger_id in self._segments:
            segment = self._segments[ledger_id]
            offsets, count = segment.offsets, len(segment.offsets)
            if entry_id >= count:
                return
            start = offsets[entry_id]
            # whole records only: those that start within the block, the last one read to its end
            stop_id = bisect_right(offsets, start + _SCAN_BLOCK_BYTES, entry_id + 1, count)
            stop = offsets[stop_id] if stop_id < count else segment.end_offset
            block = os.pread(self._read_fd(ledger_id), stop - start, start)
            if len(block) != stop - start:
                raise LedgerCorruption(f"{segment.path} of {self.name!r} ends before entry {stop_id - 1}")
            ends = offsets[entry_id + 1 : stop_id]
            ends.append(stop)
            for i, offset, end in zip(range(entry_id, stop_id), offsets[entry_id:stop_id], ends, strict=True):
                length, crc = unpack(block, offset - start)
                data = block[offset - start + RECORD.size : end - start]
                if length != len(data) or crc != crc32c(data):
                    raise LedgerCorruption(
                        f"entry {ledger_id}:{i} of {self.name!r} in {segment.path} fails its checksum")
                yield Position(ledger_id, i), data
            entry_id = stop_id

    def _read_fd(self, ledger_id: int) -> int:
        if ledger_id == self._index.current.ledger_id:
            return self._wfd()
        if self._budget is not None:
            self._budget.touch(self)
        fd = self._read_fds.get(ledger_id)
        if fd is not None:
            self._read_fds.move_to_end(ledger_id)
            return fd
        fd = os.open(self._segments[ledger_id].path, os.O_RDONLY | os.O_CLOEXEC)
        self._cache_read_fd(ledger_id, fd)
        return fd

    def detached_scan(self, after: Position, upto: Position) -> Iterable[tuple[Position, bytes]]:
        self._check_open()
        spans: list[_SegmentSpan] = []
        for info in self._index.ledgers():
            if not after.ledger_id <= info.ledger_id <= upto.ledger_id:
                continue
            segment = self._segments[info.ledger_id]
            first = max(after.entry_id + 1, 0) if info.ledger_id == after.ledger_id else 0
            stop = min(upto.entry_id + 1, len(segment.offsets)) if info.ledger_id == upto.ledger_id \
                else len(segment.offsets)
            if first < stop:
                spans.append(_SegmentSpan(segment.path, info.ledger_id, first, segment.offsets[first], stop - first))
        return _DetachedScan(spans)

    # -- trimming and lifecycle -------------------------------------------------------

    def detach_before(self, pos: Position) -> list[int]:
        self._check_open()
        ids = self._index.trimmable_before(pos)
        if not ids:
            return []
        self._index.remove_oldest(len(ids))
        paths = []
        for ledger_id in ids:
            fd = self._read_fds.pop(ledger_id, None)
            if fd is not None:
                os.close(fd)
            paths.append(self._segments.pop(ledger_id).path)
        self._cache.drop_ledgers(set(ids))
        with self._lock:
            self._detached.extend(paths)
        return ids

    def remove_detached(self) -> int:
        """The segment file goes before its index (an index without its segment is dropped
        at open); the directory is synced once at the end, and ledgers reopened before that
        sync are merely deleted again."""
        with self._lock:
            paths, self._detached = self._detached, []
        for path in paths:
            path.unlink(missing_ok=True)
            path.with_name(index_file_name(int(path.name[:-4]))).unlink(missing_ok=True)
        if paths and self.directory.exists():
            try:
                fsync_dir(self.directory)
            except OSError as exc:  # the removal is made durable by a later sync of the directory
                log.warning("managed ledger %r: directory not synced after trimming: %s", self.name, exc)
        return len(paths)

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._unwritten_from is not None and self._fault is None:
                self.flush()
            if self.unsynced():
                self.sync()
            if self._recorded is not None and self._fault is None and self._writing:
                self._record_close(self._recorded)
        finally:
            self._release()

    def _record_close(self, recorded: RecordedLedgers) -> None:
        """Every entry is durable: the list closes the ledger at its count, so the next
        owner has no writer to wait out. A list that moved meanwhile (a successor fenced
        this ledger) or a store that does not answer leaves it to the successor's fence."""
        current = self._index.current
        try:
            recorded.closed(current.ledger_id, current.entries, tuple(self._segments))
        except Exception as exc:
            log.warning("managed ledger %r: its close was not recorded (the next owner fences it): %s", self.name, exc)

    def delete(self) -> None:
        self._release()
        with self._lock:
            fds, self._dirty = self._dirty, {}
        for fd in fds.values():
            os.close(fd)
        if self.directory.exists():
            shutil.rmtree(self.directory)
            fsync_dir(self.directory.parent)
        if self._recorded is not None:
            try:
                self._recorded.deleted()
            except Exception as exc:
                log.warning("managed ledger %r: its ledger list was not deleted: %s", self.name, exc)

    def _release(self) -> None:
        if self._budget is not None:
            self._budget.forget(self)
        with self._fd_lock:
            self._closed = True
            self._cache.release_all()
            self._unwritten, self._unwritten_bytes, self._unwritten_from = [], 0, None
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1
            while self._read_fds:
                os.close(self._read_fds.popitem()[1])
        with self._lock:
            held, self._dir_fd, self._parent_fd = (self._dir_fd, self._parent_fd), -1, -1
        for fd in held:
            if fd >= 0:
                os.close(fd)


class SegmentLedgerFactory:
    """Opens :class:`SegmentLedger` s under one data directory (Pulsar's ``ManagedLedgerFactory``)."""

    def __init__(
        self,
        data_dir: Path | str,
        allocate_ledger_id: Callable[[], int],
        config: LedgerConfig | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        budget: DescriptorBudget | None = None,
        cache_budget: EntryCacheBudget | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.budget = budget
        self.cache_budget = cache_budget
        self._allocate = allocate_ledger_id
        self._config = config or LedgerConfig()
        self._clock_ms = clock_ms
        self._open: dict[str, SegmentLedger] = {}

    def open(self, name: str, first_ledger_id: int | None = None,
             recorded: RecordedLedgers | None = None) -> SegmentLedger:
        """``first_ledger_id``: the id of the ledger opening starts, taken beforehand by the
        caller, so opening may run on another thread than the one handing out ids;
        ``recorded``: the cluster's ledger list (see :class:`SegmentLedger`)."""
        current = self._open.get(name)
        if current is not None and not current.closed:
            raise StorageError(f"managed ledger {name!r} is already open; close it first")
        ledger = SegmentLedger(self.data_dir, name, self._allocate, self._config, self._clock_ms, self.budget,
                               first_ledger_id, self.cache_budget, recorded)
        self._open[name] = ledger
        return ledger
