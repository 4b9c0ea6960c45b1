"""Storage for the command-level simulation: a ledger whose writes, syncs and their
failures happen when the schedule says, and handles that complete when it says.

:class:`SimLedger` is the in-memory ledger twin with the segment ledger's write
buffer in front of it: an append takes a position at once, ``flush`` writes the buffer
(or fails, taking the buffered entries back as the segment ledger does: the ledger
ends before the first of them again), ``sync`` makes only what was written durable, and
``crash`` keeps only what was synced. :class:`Completion` is a durability handle (what
the broker service's metadata writer returns as a future) that the scheduler completes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from magnetar.core.positions import Position
from magnetar.storage.interfaces import AppendFailed, LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger, StoredLedger


class Completion:
    """A handle done later (metadata or cursor durability); callbacks run when it is."""

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        self._on_done = on_done
        self._callbacks: list[Callable[[Completion], None]] = []
        self.finished = False
        self.failure: BaseException | None = None

    def add_done_callback(self, callback: Callable[[Completion], None]) -> None:
        if self.finished:
            callback(self)
        else:
            self._callbacks.append(callback)

    def complete(self, failure: BaseException | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.failure = failure
        if failure is None and self._on_done is not None:
            self._on_done()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def exception(self) -> BaseException | None:
        return self.failure


class SimLedger(MemoryLedger):
    """The memory twin with a write buffer, write failures and syncs of written entries only."""

    def __init__(self, name: str, allocate_ledger_id: Callable[[], int], config: LedgerConfig,
                 clock_ms: Callable[[], int], stored: dict[int, StoredLedger]) -> None:
        super().__init__(name, allocate_ledger_id, config, clock_ms, stored=stored)
        #: the first appended entry not yet written, None when everything was
        self.unwritten_from: Position | None = None
        self._written = self._synced
        #: what the schedule arranged: the next flush fails
        self.fail_next_flush = False
        #: told of every append and take-back (the simulation's checker watches storage)
        self.on_append: Callable[[str, list[Position], Sequence[bytes]], None] | None = None
        self.on_take_back: Callable[[str, Position], None] | None = None

    def append_many(self, entries: Sequence[bytes]) -> list[Position]:
        positions = super().append_many(entries)
        if self.unwritten_from is None:
            self.unwritten_from = positions[0]
        if self.on_append is not None:
            self.on_append(self.name, positions, entries)
        if self._index.current.ledger_id != positions[-1].ledger_id:
            # the segment ledger writes its buffer before it rolls over to the next file
            self._write_all()
        return positions

    def flush(self) -> None:
        first = self.unwritten_from
        if first is None:
            return
        if self.fail_next_flush:
            self.fail_next_flush = False
            self._take_back(first)
            raise AppendFailed(self.name, first, "simulated write failure")
        self._write_all()

    def _write_all(self) -> None:
        self.unwritten_from = None
        self._written = self.last_position()

    def _take_back(self, first: Position) -> None:
        stored = self._stored[first.ledger_id].entries
        dropped = stored[first.entry_id:]
        del stored[first.entry_id:]
        self._index.take_back(len(dropped), sum(len(e) for e in dropped))
        self.unwritten_from = None
        self._last_appended = self._index.last_position()
        if self.on_take_back is not None:
            self.on_take_back(self.name, first)

    def sync(self) -> Position | None:
        with self._lock:
            if self._written is not None and self._written != self._synced:
                self.sync_count += 1
                self._synced = self._written
            return self._synced

    def written(self) -> Position | None:
        return self._written

    def synced(self) -> Position | None:
        return self._synced

    def close(self) -> None:
        """Closing writes and syncs what is buffered (the file store's close)."""
        if not self.closed:
            self._write_all()
        super().close()


class SimLedgers:
    """Every topic's ledgers across broker restarts (the ledger directory)."""

    def __init__(self, config: LedgerConfig, clock_ms: Callable[[], int]) -> None:
        self._ids = itertools.count(1)
        self._config = config
        self._clock_ms = clock_ms
        self._topics: dict[str, dict[int, StoredLedger]] = {}
        self.open: dict[str, SimLedger] = {}
        self.on_append: Callable[[str, list[Position], Sequence[bytes]], None] | None = None
        self.on_take_back: Callable[[str, Position], None] | None = None

    def open_ledger(self, name: str) -> SimLedger:
        ledger = SimLedger(name, self._ids.__next__, self._config, self._clock_ms,
                           self._topics.setdefault(name, {}))
        ledger.on_append, ledger.on_take_back = self.on_append, self.on_take_back
        self.open[name] = ledger
        return ledger

    def crash(self) -> dict[str, Position | None]:
        """A power cut: every open ledger keeps only what it synced (returned, per topic)."""
        kept = {}
        for name, ledger in self.open.items():
            if not ledger.closed:
                kept[name] = ledger.synced()
                ledger.crash()
        self.open.clear()
        return kept
