"""A bound on the files the broker's ledgers hold open, whatever the number of topics.

Each open ledger keeps its current segment's descriptor (appends, reads of the tail) and
a few of its older segments' (reads). With thousands of topics those add up past the
process's limit, and running out fails whichever topic asks next. So ledgers register
here when they take a descriptor; past the budget, the least recently used ledger gives
its descriptors back (it reopens them when next used). A ledger with unwritten appends
is passed over: its descriptor is about to be used.

Only the thread that made the budget (the broker's event loop, which does every append
and read) makes ledgers give descriptors back; a ledger closing on another thread only
registers, so no descriptor is closed under a thread using it.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from itertools import islice
from typing import Protocol


class DescriptorHolder(Protocol):
    def drop_descriptors(self) -> bool:
        """Close every descriptor that can be reopened later; False if it cannot now."""
        ...


def default_budget() -> int:
    """A quarter of the process's descriptor limit in ledgers (a ledger holds one to a
    few): the rest is for sockets, SQLite and the descriptors syncs take."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else 1 << 20
    return max(16, limit // 4)


class DescriptorBudget:
    def __init__(self, max_holders: int) -> None:
        self.max_holders = max(1, max_holders)
        self._holders: OrderedDict[int, DescriptorHolder] = OrderedDict()
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        #: ledgers made to give their descriptors back, over the broker's life
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._holders)

    def touch(self, holder: DescriptorHolder) -> None:
        """``holder`` uses its descriptors now; past the budget, others give theirs back."""
        key = id(holder)
        with self._lock:
            if key in self._holders:
                self._holders.move_to_end(key)
                return
            self._holders[key] = holder
        self.enforce(holder)

    def enforce(self, keep: object = None) -> None:
        """Past the budget, the least recently used holders but ``keep`` give their
        descriptors back; on the owner's thread only (elsewhere holders just register,
        and the owner enforces once it uses what was opened there)."""
        if threading.get_ident() != self._owner:
            return
        with self._lock:
            over = len(self._holders) - self.max_holders
            # the least recently used few, not a copy of every holder (this runs per new file)
            candidates = list(islice(self._holders.items(), over + 8)) if over > 0 else []
        for other_key, other in candidates:
            if over <= 0:
                break
            if other is keep:
                continue
            if other.drop_descriptors():
                with self._lock:
                    if self._holders.pop(other_key, None) is not None:
                        over -= 1
                        self.evictions += 1

    def forget(self, holder: DescriptorHolder) -> None:
        with self._lock:
            self._holders.pop(id(holder), None)
