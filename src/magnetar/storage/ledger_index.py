"""Position arithmetic over a managed ledger's list of ledgers.

Both ledger implementations keep their ledgers' entry counts here and answer every
position question (first, last, next, counts, what trimming may delete) through it, so
the file store and its in-memory twin cannot drift apart. It corresponds to the ledger
map (``ledgers``) that Pulsar's ``ManagedLedgerImpl`` consults for the same answers.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter

from magnetar.core.positions import Position
from magnetar.storage.interfaces import MAX_ENTRY_SIZE_BYTES, LedgerClosed, LedgerConfig, LedgerInfo


@dataclass(slots=True)
class LedgerSlot:
    """A ledger's running totals; the last slot is the current ledger."""

    ledger_id: int
    timestamp_ms: int
    entries: int = 0
    size_bytes: int = 0

    def info(self) -> LedgerInfo:
        return LedgerInfo(self.ledger_id, self.entries, self.size_bytes, self.timestamp_ms)


_BY_ID = attrgetter("ledger_id")


class LedgerIndex:
    """The ordered ledgers of one managed ledger and their entry counts."""

    def __init__(self) -> None:
        self._slots: list[LedgerSlot] = []

    def add_ledger(self, ledger_id: int, timestamp_ms: int, entries: int = 0, size_bytes: int = 0) -> None:
        """Append a ledger; it becomes the current one. Ids must grow."""
        if self._slots and ledger_id <= self._slots[-1].ledger_id:
            raise ValueError(
                f"ledger id {ledger_id} does not follow {self._slots[-1].ledger_id}: "
                "the ledger id counter must never go backwards"
            )
        self._slots.append(LedgerSlot(ledger_id, timestamp_ms, entries, size_bytes))

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def current(self) -> LedgerSlot:
        return self._slots[-1]

    def slot(self, ledger_id: int) -> LedgerSlot | None:
        i = bisect_left(self._slots, ledger_id, key=_BY_ID)
        if i < len(self._slots) and self._slots[i].ledger_id == ledger_id:
            return self._slots[i]
        return None

    def record_append(self, size_bytes: int, entries: int) -> Position:
        """Count ``entries`` more entries of ``size_bytes`` in all in the current ledger;
        the position of the first."""
        slot = self._slots[-1]
        pos = Position(slot.ledger_id, slot.entries)
        slot.entries += entries
        slot.size_bytes += size_bytes
        return pos

    def take_back(self, entries: int, size_bytes: int) -> None:
        """Forget the last ``entries`` appends of the current ledger (a failed write)."""
        slot = self._slots[-1]
        if not 0 <= entries <= slot.entries:
            raise ValueError(f"cannot take back {entries} of {slot.entries} entries")
        slot.entries -= entries
        slot.size_bytes -= size_bytes

    def contains(self, pos: Position) -> bool:
        slot = self.slot(pos.ledger_id)
        return slot is not None and 0 <= pos.entry_id < slot.entries

    def first_position(self) -> Position | None:
        for slot in self._slots:
            if slot.entries:
                return Position(slot.ledger_id, 0)
        return None

    def last_position(self) -> Position | None:
        for slot in reversed(self._slots):
            if slot.entries:
                return Position(slot.ledger_id, slot.entries - 1)
        return None

    def end_position(self) -> Position:
        """Where the next append lands."""
        slot = self._slots[-1]
        return Position(slot.ledger_id, slot.entries)

    def next_position(self, pos: Position) -> Position:
        current = self._slots[-1] if self._slots else None
        if current is not None and pos.ledger_id == current.ledger_id:  # the common case: the tail
            entry_id = pos.entry_id + 1 if pos.entry_id >= 0 else 0
            return Position(pos.ledger_id, min(entry_id, current.entries))
        i = bisect_left(self._slots, pos.ledger_id, key=_BY_ID)
        if i < len(self._slots) and self._slots[i].ledger_id == pos.ledger_id:
            entry_id = max(pos.entry_id + 1, 0)
            if entry_id < self._slots[i].entries:
                return Position(pos.ledger_id, entry_id)
            i += 1
        for slot in self._slots[i:]:
            if slot.entries:
                return Position(slot.ledger_id, 0)
        return self.end_position()

    def entries_between(self, start: Position, end: Position) -> int:
        total = 0
        for slot in self._slots[bisect_left(self._slots, start.ledger_id, key=_BY_ID) :]:
            if slot.ledger_id > end.ledger_id:
                break
            low = start.entry_id if slot.ledger_id == start.ledger_id else 0
            high = end.entry_id if slot.ledger_id == end.ledger_id else slot.entries - 1
            low, high = max(low, 0), min(high, slot.entries - 1)
            total += max(high - low + 1, 0)
        return total

    def ledgers(self) -> list[LedgerInfo]:
        return [slot.info() for slot in self._slots]

    def total_size_bytes(self) -> int:
        return sum(slot.size_bytes for slot in self._slots)

    def trimmable_before(self, pos: Position) -> list[int]:
        """Ids of the oldest ledgers whose every entry lies before ``pos``, never the current."""
        ids = []
        for slot in self._slots[:-1]:
            if Position(slot.ledger_id, slot.entries - 1) >= pos:
                break
            ids.append(slot.ledger_id)
        return ids

    def remove_oldest(self, count: int) -> None:
        """Forget the ``count`` oldest ledgers (after :meth:`trimmable_before`)."""
        if count >= len(self._slots):
            raise ValueError("the current ledger cannot be removed")
        del self._slots[:count]


def check_entry(name: str, data: bytes) -> None:
    """Refuse what no ledger stores: empty entries (a torn, zero-filled tail would read as
    a run of them) and entries too long to frame."""
    if not isinstance(data, bytes):
        raise TypeError(f"entry for {name!r} must be bytes, not {type(data).__name__}")
    if not data:
        raise ValueError(f"empty entry for {name!r}: an entry holds at least the message metadata")
    if len(data) > MAX_ENTRY_SIZE_BYTES:
        raise ValueError(f"entry of {len(data)} bytes for {name!r} exceeds {MAX_ENTRY_SIZE_BYTES}")


def appendable(name: str, slot: LedgerSlot, config: LedgerConfig, entries: Sequence[bytes]) -> tuple[int, int]:
    """How many of ``entries`` the current ledger (not full) takes in one go, and their
    bytes: each while the ledger was not full before it, as appending them one at a time
    would. The first is checked (:func:`check_entry` raises for it); a later one that no
    ledger stores ends the run, so that it is refused on its own."""
    first = entries[0]
    check_entry(name, first)
    count, size_bytes = 1, len(first)
    size_room = config.max_size_per_ledger_bytes - slot.size_bytes
    for data in islice(entries, 1, config.max_entries_per_ledger - slot.entries):
        if size_bytes >= size_room or type(data) is not bytes or not data or len(data) > MAX_ENTRY_SIZE_BYTES:
            break
        count += 1
        size_bytes += len(data)
    return count, size_bytes


def is_full(slot: LedgerSlot, config: LedgerConfig) -> bool:
    """Whether the current ledger must roll over before the next append."""
    return slot.entries >= config.max_entries_per_ledger or slot.size_bytes >= config.max_size_per_ledger_bytes


def wall_clock_ms() -> int:
    """Ledger creation timestamps: Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


class IndexedLedger:
    """What both ledger implementations do alike: what their :class:`LedgerIndex` answers
    alone, the closed check, rolling over and trimming in two steps."""

    name: str
    _index: LedgerIndex
    _closed: bool

    def _open_ledger(self) -> None:
        raise NotImplementedError

    def detach_before(self, pos: Position) -> list[int]:
        raise NotImplementedError

    def remove_detached(self) -> int:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed(f"managed ledger {self.name!r} is closed")

    def _check_writable(self) -> None:
        self._check_open()

    def roll_over(self) -> None:
        self._check_writable()
        if self._index.current.entries:
            self._open_ledger()

    def trim_before(self, pos: Position) -> list[int]:
        ids = self.detach_before(pos)
        self.remove_detached()
        return ids

    def first_position(self) -> Position | None:
        return self._index.first_position()

    def last_position(self) -> Position | None:
        return self._index.last_position()

    def next_position(self, pos: Position) -> Position:
        return self._index.next_position(pos)

    def entries_between(self, start: Position, end: Position) -> int:
        return self._index.entries_between(start, end)

    def ledgers(self) -> list[LedgerInfo]:
        return self._index.ledgers()

    def total_size_bytes(self) -> int:
        return self._index.total_size_bytes()
