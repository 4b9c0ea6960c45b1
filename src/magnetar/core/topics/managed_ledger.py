"""What the broker core asks of storage: the managed ledger (Pulsar's ``ManagedLedger``).

A managed ledger is one topic's log: a sequence of ledgers (Pulsar/BookKeeper's unit of
storage, here one segment file each), every entry addressed by a
:class:`~magnetar.core.positions.Position`. The core calls it synchronously from its one
owner thread; only :meth:`ManagedLedger.sync` may run on another thread (the group-commit
worker), so fsync never blocks the event loop.

Rules both implementations keep (the shared suite in ``tests/store`` checks them):

- A ledger id comes from a broker-wide counter, so ids grow across ledgers and topics.
- Opening a managed ledger always starts a fresh current ledger; an old ledger is never
  appended to again. Positions past a recovered (truncated) tail are therefore never
  handed out twice.
- The current ledger always exists and is never full: :meth:`ManagedLedger.roll_over`
  and the automatic rollover open the next ledger at once, so
  ``next_position(last_position())`` is exactly where the next append lands.
- Non-current ledgers are never empty (an empty one is dropped when the ledger opens).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from magnetar.core.positions import Position

#: Largest entry a segment record can frame (u32 length). Pulsar's ``maxMessageSize``
#: (5 MiB by default) is enforced long before this, at the protocol layer.
MAX_ENTRY_SIZE_BYTES = 0xFFFF_FFFF


class StorageError(Exception):
    """Storage could not do what was asked; the message says which topic and why."""


class AppendFailed(StorageError):
    """Buffered appends from ``position`` on could not be written and were taken back:
    the ledger ends before ``position`` again, and the next append lands there."""

    def __init__(self, name: str, position: Position, reason: str) -> None:
        super().__init__(f"cannot append to {name!r} from {position}: {reason}")
        self.position = position
        self.reason = reason


class EntryNotFound(StorageError, KeyError):
    """No entry at that position: it was trimmed, or it lies beyond the end."""

    def __init__(self, name: str, position: Position) -> None:
        super().__init__(f"no entry {position} in managed ledger {name!r} (trimmed or beyond the end)")
        self.position = position

    def __str__(self) -> str:
        return str(self.args[0])


class LedgerClosed(StorageError):
    """The managed ledger was closed or deleted; open it again to use it."""


class LedgerCorruption(StorageError):
    """Stored bytes fail their checks in a way a crash cannot explain (not a torn tail)."""


@dataclass(frozen=True)
class LedgerInfo:
    """One ledger of a managed ledger, as internal stats report it."""

    ledger_id: int
    entries: int
    size_bytes: int
    #: When the ledger was created (Unix epoch milliseconds).
    timestamp_ms: int


@dataclass(frozen=True)
class LedgerConfig:
    """Limits of a managed ledger; each maps to a Pulsar broker.conf key where one exists."""

    #: ``managedLedgerMaxEntriesPerLedger``: roll over after this many entries.
    max_entries_per_ledger: int = 50_000
    #: ``managedLedgerMaxSizePerLedgerMbytes`` (2048) in bytes: roll over past this size.
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024
    #: Recently appended entries kept in memory per topic so tailing reads skip the disk.
    cache_max_entries: int = 10_000
    cache_max_bytes: int = 16 * 1024 * 1024
    #: Synced data further than this behind a ledger's end leaves the OS page cache (None:
    #: kept until the kernel needs the memory); ``journalRemoveFromPageCache``
    page_cache_window_bytes: int | None = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        for field_name in ("max_entries_per_ledger", "max_size_per_ledger_bytes"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"LedgerConfig.{field_name} must be at least 1")
        for field_name in ("cache_max_entries", "cache_max_bytes"):
            if getattr(self, field_name) < 0:
                raise ValueError(f"LedgerConfig.{field_name} must not be negative")
        if self.page_cache_window_bytes is not None and self.page_cache_window_bytes < 0:
            raise ValueError("LedgerConfig.page_cache_window_bytes must not be negative")


class ManagedLedger(Protocol):
    """One topic's append-only log of entries (Pulsar's ``ManagedLedger``)."""

    #: The topic name.
    name: str

    def append(self, data: bytes) -> Position:
        """Store a non-empty entry at the next position; readable at once, written to the
        file by :meth:`flush`, durable after the :meth:`sync` that follows.

        May flush earlier appends first (a full ledger, a full buffer): if that fails it
        raises :class:`AppendFailed` and ``data`` is not appended."""
        ...

    def append_many(self, entries: Sequence[bytes]) -> list[Position]:
        """Append the longest prefix of ``entries`` that the current ledger takes (at least
        the first, which fails as :meth:`append` would), with one check of the buffer and
        the ledger for all of them: a read's worth of one producer's sends. Their positions,
        consecutive; the caller appends the rest with the next call."""
        ...

    def flush(self) -> None:
        """Write buffered appends to the file, one write for all of them (the owner thread,
        once per event-loop turn). On failure the unwritten appends are taken back and
        :class:`AppendFailed` says from which position."""
        ...

    def unsynced(self) -> bool:
        """Whether appended data is not yet durable."""
        ...

    def sync(self) -> Position | None:
        """Make every entry flushed before the call durable; return the last position covered.

        Safe to call from a worker thread while the owner thread keeps appending.
        """
        ...

    def read(self, pos: Position) -> bytes:
        """The entry at ``pos``; :class:`EntryNotFound` if trimmed or beyond the end."""
        ...

    def iter_entries(self, after: Position) -> Iterator[tuple[Position, bytes]]:
        """Every entry after ``after`` in position order: a sequential scan.

        For replays of a whole topic (deduplication recovery at load), where one
        :meth:`read` per entry costs more than the work done with the entry. Covers
        the ledgers that exist when the iteration begins, including entries appended
        to them while it is suspended; a ledger trimmed meanwhile is skipped from there on.
        """
        ...

    def detached_scan(self, after: Position, upto: Position) -> Iterable[tuple[Position, bytes]]:
        """The durable entries in (``after``, ``upto``], to be read on another thread.

        Called on the owner thread; the iterable it returns may be iterated, more than once,
        on any thread while the owner goes on appending (it reads through descriptors of
        its own from a snapshot of where the entries lie). For compaction, which must not
        read a whole topic on the event loop. A ledger deleted meanwhile raises
        :class:`StorageError` from the iteration.
        """
        ...

    def first_position(self) -> Position | None:
        """The oldest retained entry, None when there is none."""
        ...

    def last_position(self) -> Position | None:
        """The newest retained entry, None when there is none."""
        ...

    def next_position(self, pos: Position) -> Position:
        """The first existing position after ``pos``, crossing ledgers.

        When no entry follows, the end position: (current ledger, its entry count), where
        the next append lands. Never beyond the end, so a position past a truncated tail
        maps back to the end.
        """
        ...

    def entries_between(self, start: Position, end: Position) -> int:
        """How many existing entries lie in [start, end]."""
        ...

    def ledgers(self) -> list[LedgerInfo]:
        """Every retained ledger, oldest first, the current (possibly empty) one last."""
        ...

    def total_size_bytes(self) -> int:
        """Sum of the retained entries' sizes."""
        ...

    def trim_before(self, pos: Position) -> list[int]:
        """Delete the ledgers whose entries all lie before ``pos``, never the current one:
        :meth:`detach_before` then :meth:`remove_detached`. Returns the deleted ledger ids.
        """
        ...

    def detach_before(self, pos: Position) -> list[int]:
        """Forget the ledgers whose entries all lie before ``pos``, never the current one:
        from now on they are not read, counted or listed. Their data stays where it is until
        :meth:`remove_detached`; a crash in between brings them back whole at the next open,
        and they are deleted again. Returns the detached ledger ids."""
        ...

    def remove_detached(self) -> int:
        """Remove the stored data of detached ledgers, oldest first (so that a crash part-way
        leaves the oldest ledgers gone, never a hole). May run on a worker thread while the
        owner thread goes on appending and reading. Returns how many ledgers were removed."""
        ...

    def roll_over(self) -> None:
        """Close the current ledger and open the next (a no-op while the current is empty)."""
        ...

    def close(self) -> None:
        """Make pending data durable and release files; later appends and reads fail."""
        ...

    def delete(self) -> None:
        """Remove all of the topic's data."""
        ...


class LedgerFactory(Protocol):
    """Opens managed ledgers by topic name (Pulsar's ``ManagedLedgerFactory``)."""

    def open(self, name: str) -> ManagedLedger:
        """Open (creating if needed) the managed ledger of topic ``name``."""
        ...
