"""One memory limit for the tail caches of every ledger (Pulsar's ``managedLedgerCacheSizeMB``).

Each ledger keeps its most recent entries in memory so that tailing consumers never read
the disk, bounded per ledger (``LedgerConfig.cache_max_entries`` / ``cache_max_bytes``).
Without a limit across ledgers, a client that writes a few megabytes into each of many
topics makes the broker hold all of it until the topics go idle and unload. Pulsar shares
one entry cache budget among all topics and evicts the oldest entries first; here a
ledger that appends while the budget is spent first empties the caches of the ledgers
that appended least recently, then drops its own oldest entries; an entry that still
does not fit is simply not cached, and reads of it go to the segment file.

The owner thread (the event loop) appends; a ledger may be closed on another thread, so
the bookkeeping takes a lock.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Protocol

#: Pulsar's default when ``managedLedgerCacheSizeMB`` is not set: a fifth of the memory
#: the JVM may use for it; here a fifth of the machine's memory
DEFAULT_SHARE_OF_MEMORY = 5


class BudgetedCache(Protocol):
    """A cache whose bytes count against the budget."""

    def release_all(self) -> None:
        """Drop every entry (the budget is told through :meth:`EntryCacheBudget.released`)."""
        ...


class EntryCacheBudget:
    """Bytes all tail caches together may hold; ``limit_bytes`` 0 caches nothing."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 0:
            raise ValueError(f"the entry cache budget must not be negative, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        #: caches that hold something, least recently appended first
        self._holders: OrderedDict[int, BudgetedCache] = OrderedDict()
        self._lock = threading.Lock()
        #: caches emptied to make room for another's appends
        self.evicted_caches = 0

    def added(self, cache: BudgetedCache, size: int) -> None:
        """``cache`` took ``size`` bytes of new entries; it is now the most recent holder."""
        with self._lock:
            self.used_bytes += size
            key = id(cache)
            self._holders[key] = cache
            self._holders.move_to_end(key)

    def released(self, cache: BudgetedCache, size: int, empty: bool) -> None:
        with self._lock:
            self.used_bytes -= size
            if empty:
                self._holders.pop(id(cache), None)

    def over(self) -> bool:
        return self.used_bytes > self.limit_bytes

    def make_room(self, cache: BudgetedCache) -> None:
        """Empty the caches that appended least recently, other than ``cache``, until the
        budget holds again or only ``cache`` is left to give."""
        while self.over():
            victim = self._take_least_recent_other(cache)
            if victim is None:
                return
            self.evicted_caches += 1
            victim.release_all()

    def _take_least_recent_other(self, cache: BudgetedCache) -> BudgetedCache | None:
        """Taken off the holders before it is emptied, so that each is asked once."""
        with self._lock:
            for key, candidate in self._holders.items():
                if candidate is not cache:
                    del self._holders[key]
                    return candidate
        return None


def cache_budget(size_mb: int | None) -> EntryCacheBudget:
    """The budget ``managedLedgerCacheSizeMB`` asks for (None: a fifth of the machine's memory)."""
    if size_mb is None:
        return EntryCacheBudget(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // DEFAULT_SHARE_OF_MEMORY)
    return EntryCacheBudget(size_mb * 1024 * 1024)
