"""The in-memory twin of the segment-file managed ledger, for core tests and simulation.

It shares :class:`~magnetar.storage.ledger_index.LedgerIndex` with the file store, so
positions, rollover and trimming behave identically; ``sync()`` only marks entries
durable. :class:`MemoryLedgerFactory` keeps each topic's entries across close and reopen,
the way files survive a broker restart.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from magnetar.core.positions import Position
from magnetar.storage.interfaces import (
    EntryNotFound,
    LedgerConfig,
    StorageError,
)
from magnetar.storage.ledger_index import IndexedLedger, LedgerIndex, appendable, is_full, wall_clock_ms

log = logging.getLogger("magnetar.storage")


@dataclass
class StoredLedger:
    """One ledger's entries as the twin keeps them."""

    timestamp_ms: int
    entries: list[bytes] = field(default_factory=list)


class MemoryLedger(IndexedLedger):
    """A managed ledger held in memory (see :class:`~magnetar.storage.interfaces.ManagedLedger`)."""

    def __init__(
        self,
        name: str,
        allocate_ledger_id: Callable[[], int] | None = None,
        config: LedgerConfig | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        *,
        stored: dict[int, StoredLedger] | None = None,
    ) -> None:
        self.name = name
        self._allocate = allocate_ledger_id or itertools.count(1).__next__
        self._config = config or LedgerConfig()
        self._clock_ms = clock_ms
        #: Shared with the factory, so a reopened ledger finds its entries again.
        self._stored: dict[int, StoredLedger] = {} if stored is None else stored
        self._index = LedgerIndex()
        for ledger_id in sorted(self._stored):
            ledger = self._stored[ledger_id]
            if not ledger.entries:
                del self._stored[ledger_id]
                continue
            size = sum(len(entry) for entry in ledger.entries)
            self._index.add_ledger(ledger_id, ledger.timestamp_ms, len(ledger.entries), size)
        self._lock = threading.Lock()
        #: ledgers detached and not yet removed, oldest first
        self._detached: list[int] = []
        self._last_appended = self._index.last_position()
        self._synced = self._last_appended
        self._closed = False
        #: sync() calls that had something to make durable.
        self.sync_count = 0
        self._open_ledger()

    @property
    def closed(self) -> bool:
        return self._closed

    def _open_ledger(self) -> None:
        ledger_id, timestamp_ms = self._allocate(), self._clock_ms()
        self._index.add_ledger(ledger_id, timestamp_ms)
        self._stored[ledger_id] = StoredLedger(timestamp_ms)

    def append(self, data: bytes) -> Position:
        return self.append_many((data,))[0]

    def append_many(self, entries: Sequence[bytes]) -> list[Position]:
        self._check_open()
        if is_full(self._index.current, self._config):
            self._open_ledger()  # the rollover after the previous append failed
        count, size_bytes = appendable(self.name, self._index.current, self._config, entries)
        self._stored[self._index.current.ledger_id].entries.extend(entries[:count])
        ledger_id, first = self._index.record_append(size_bytes, count)
        positions = [Position(ledger_id, entry_id) for entry_id in range(first, first + count)]
        with self._lock:
            self._last_appended = positions[-1]
        if is_full(self._index.current, self._config):
            try:
                self._open_ledger()
            except Exception as exc:  # the entries are stored; the next append retries
                log.warning("managed ledger %r: rollover failed: %s", self.name, exc)
        return positions

    def flush(self) -> None:
        """Nothing to write: an append is in memory at once."""

    def unsynced(self) -> bool:
        with self._lock:
            return self._last_appended != self._synced

    def sync(self) -> Position | None:
        with self._lock:
            if self._last_appended != self._synced:
                self.sync_count += 1
                self._synced = self._last_appended
            return self._synced

    def read(self, pos: Position) -> bytes:
        self._check_open()
        if not self._index.contains(pos):
            raise EntryNotFound(self.name, pos)
        return self._stored[pos.ledger_id].entries[pos.entry_id]

    def iter_entries(self, after: Position) -> Iterator[tuple[Position, bytes]]:
        self._check_open()
        for info in self._index.ledgers():
            if info.ledger_id < after.ledger_id:
                continue
            entry_id = max(after.entry_id + 1 if info.ledger_id == after.ledger_id else 0, 0)
            while not self._closed and (slot := self._index.slot(info.ledger_id)) is not None \
                    and entry_id < slot.entries:
                yield Position(info.ledger_id, entry_id), self._stored[info.ledger_id].entries[entry_id]
                entry_id += 1

    def detached_scan(self, after: Position, upto: Position) -> Iterable[tuple[Position, bytes]]:
        return [entry for entry in self.iter_entries(after) if entry[0] <= upto] if upto > after else []

    def detach_before(self, pos: Position) -> list[int]:
        """As with segment files, detached entries stay stored until :meth:`remove_detached`:
        a crash (or a reopen) in between finds them again."""
        self._check_open()
        ids = self._index.trimmable_before(pos)
        self._index.remove_oldest(len(ids))
        with self._lock:
            self._detached.extend(ids)
        return ids

    def remove_detached(self) -> int:
        with self._lock:
            ids, self._detached = self._detached, []
        for ledger_id in ids:
            self._stored.pop(ledger_id, None)
        return len(ids)

    def close(self) -> None:
        if not self._closed:
            self.sync()
            self._closed = True

    def delete(self) -> None:
        self._closed = True
        self._stored.clear()

    def crash(self) -> None:
        """What a power cut leaves: entries never synced are gone, the ledger is closed
        without the sync :meth:`close` would make (for crash-and-restart simulations)."""
        synced = self._synced
        for ledger_id in list(self._stored):
            if synced is None or ledger_id > synced.ledger_id:
                del self._stored[ledger_id]
            elif ledger_id == synced.ledger_id:
                del self._stored[ledger_id].entries[synced.entry_id + 1:]
        self._closed = True


class MemoryLedgerFactory:
    """Opens :class:`MemoryLedger` s by topic name; a topic's entries outlive close/reopen."""

    def __init__(
        self,
        allocate_ledger_id: Callable[[], int] | None = None,
        config: LedgerConfig | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._allocate = allocate_ledger_id or itertools.count(1).__next__
        self._config = config or LedgerConfig()
        self._clock_ms = clock_ms
        self._topics: dict[str, dict[int, StoredLedger]] = {}
        self._open: dict[str, MemoryLedger] = {}

    def open(self, name: str) -> MemoryLedger:
        current = self._open.get(name)
        if current is not None and not current.closed:
            raise StorageError(f"managed ledger {name!r} is already open; close it first")
        stored = self._topics.setdefault(name, {})
        ledger = MemoryLedger(name, self._allocate, self._config, self._clock_ms, stored=stored)
        self._open[name] = ledger
        return ledger
