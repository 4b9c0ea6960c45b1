"""Simulated storage for the broker-wide simulation: ledgers that write, sync and fail
the way the segment-file ledger does, completions the simulation hands to the broker
in any order the real storage allows, and the metadata store's cursors and snapshots.

A topic's ledger buffers appends until the shell flushes them (one write per topic and
loop turn); a failed write takes the buffered entries back (:class:`AppendFailed`), so
the next append lands where the first of them stood. A sync makes what was written
durable and queues a completion; completions of one ledger reach the broker in sync
order, those of different ledgers in any interleaving (the group committer syncs
ledgers one after another and reports them together, or not). A failed sync leaves the
written entries either on disk or not (the kernel may have written them anyway); a
crash keeps only what was synced.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage.interfaces import AppendFailed, LedgerConfig, StorageError
from magnetar.storage.memory_ledger import MemoryLedger, StoredLedger


class SyncFailed(StorageError):
    """The simulated fsync failed."""


class SimLedger(MemoryLedger):
    """A memory ledger whose appends wait for a flush, and whose flush and sync can fail."""

    def __init__(self, name: str, storage: SimStorage, stored: dict[int, StoredLedger]) -> None:
        super().__init__(name, storage.allocate, storage.ledger_config, storage.clock_ms, stored=stored)
        #: the first appended entry not yet written (None: everything appended was written)
        self.unflushed_from: Position | None = None
        #: the last entry written (a sync makes entries up to here durable)
        self.flushed: Position | None = self.last_position()
        self.fail_next_flush = False
        self.fail_next_sync = False
        #: the next append writes the buffer first, and that fails (a full buffer on a full disk)
        self.fail_next_append = False
        #: how often written-to-be entries were taken back
        self.take_backs = 0

    def append_many(self, entries: Sequence[bytes]) -> list[Position]:
        if self.fail_next_append and self.unflushed_from is not None:
            self.fail_next_append = False
            raise AppendFailed(self.name, self._take_back(), "simulated write failure")
        before = self.unflushed_from
        positions = super().append_many(entries)
        if before is None:
            self.unflushed_from = positions[0]
        if self.last_position() != positions[-1] or self._index.current.ledger_id != positions[-1].ledger_id:
            # the ledger rolled over: as the segment ledger, its buffer is written first
            self.unflushed_from = None
            self.flushed = positions[-1]
        return positions

    def flush(self) -> None:
        if self.unflushed_from is None:
            return
        if not self.fail_next_flush:
            self.unflushed_from = None
            self.flushed = self.last_position()
            return
        self.fail_next_flush = False
        raise AppendFailed(self.name, self._take_back(), "simulated write failure")

    def _take_back(self) -> Position:
        """Forget the entries not written yet; the position of the first."""
        first = self.unflushed_from
        assert first is not None
        self.unflushed_from = None
        self.take_backs += 1
        stored = self._stored[first.ledger_id].entries
        dropped = stored[first.entry_id:]
        del stored[first.entry_id:]
        self._index.take_back(len(dropped), sum(len(e) for e in dropped))
        with self._lock:
            self._last_appended = self._index.last_position()
        return first

    def sync(self) -> Position | None:
        if self.fail_next_sync:
            self.fail_next_sync = False
            raise SyncFailed(f"simulated fsync failure on {self.name}")
        with self._lock:
            if self.flushed is not None and self.flushed != self._synced:
                self.sync_count += 1
                self._synced = self.flushed
            return self._synced

    def written_unsynced(self) -> bool:
        """Whether a sync has something to make durable."""
        with self._lock:
            return self.flushed is not None and self.flushed != self._synced

    def lose_power(self, keep_written: bool) -> None:
        """A crash (or a failed sync's unload): entries not synced are gone, unless
        ``keep_written`` and they were written (the kernel wrote them after all)."""
        if keep_written and self.flushed is not None:
            with self._lock:
                self._synced = self.flushed
        self.crash()


@dataclass
class SimStorage:
    """Every topic's ledgers and the metadata store, as they survive crashes."""

    ledger_config: LedgerConfig
    now: list[int]
    ledgers: dict[str, dict[int, StoredLedger]] = field(default_factory=dict)
    #: the metadata store: cursor records by (topic, subscription), dedup snapshots by topic
    cursors: dict[tuple[str, str], CursorRecord] = field(default_factory=dict)
    dedup_snapshots: dict[str, CursorRecord] = field(default_factory=dict)
    #: syncs done whose completion has not reached the broker yet, per topic, in order
    completions: dict[str, deque[tuple[SimLedger, Position]]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def allocate(self) -> int:
        return next(self._ids)

    def clock_ms(self) -> int:
        return self.now[0]

    def open(self, name: str) -> SimLedger:
        return SimLedger(name, self, self.ledgers.setdefault(name, {}))

    def sync(self, ledger: SimLedger) -> Position | None:
        """fsync the ledger; the completion is queued (raises :class:`SyncFailed`)."""
        pos = ledger.sync()
        queue = self.completions.setdefault(ledger.name, deque())
        last = queue[-1][1] if queue else None
        if pos is not None and (last is None or pos > last):
            queue.append((ledger, pos))
        return pos

    def take_completion(self, name: str) -> tuple[SimLedger, Position] | None:
        queue = self.completions.get(name)
        return queue.popleft() if queue else None

    def forget_completions(self, name: str | None = None) -> None:
        """A crash (all) or an unload (one topic): reports not yet handled are dropped."""
        if name is None:
            self.completions.clear()
        else:
            self.completions.pop(name, None)
