"""A min-heap of (timestamp, ledger id, entry id) triples packed into single ints.

Pulsar's ``TripleLongPriorityQueue`` keeps the three longs in off-heap arrays; here each
triple is one Python int ``timestamp << 96 | ledger_id << 32 | entry_id``. Integer order is
then exactly tuple order, so ``heapq`` works unchanged, and an element costs one int object
(about 44 bytes) plus a list slot instead of a tuple of three ints (about 160 bytes).
Entry ids must fit in 32 bits and ledger ids in 64 (see ``tracker.check_position``).
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterable, Iterator

_ENTRY_BITS = 32
_TIMESTAMP_SHIFT = 96
_ENTRY_MASK = (1 << _ENTRY_BITS) - 1
_LEDGER_MASK = (1 << 64) - 1


def pack(timestamp_ms: int, ledger_id: int, entry_id: int) -> int:
    """One int that sorts like the tuple ``(timestamp_ms, ledger_id, entry_id)``."""
    return (timestamp_ms << _TIMESTAMP_SHIFT) | (ledger_id << _ENTRY_BITS) | entry_id


def unpack(key: int) -> tuple[int, int, int]:
    """The ``(timestamp_ms, ledger_id, entry_id)`` a packed key stands for."""
    return key >> _TIMESTAMP_SHIFT, (key >> _ENTRY_BITS) & _LEDGER_MASK, key & _ENTRY_MASK


def key_timestamp(key: int) -> int:
    return key >> _TIMESTAMP_SHIFT


def key_position(key: int) -> tuple[int, int]:
    """The ``(ledger_id, entry_id)`` of a packed key."""
    return (key >> _ENTRY_BITS) & _LEDGER_MASK, key & _ENTRY_MASK


class TripleLongPriorityQueue:
    """Min-heap of packed keys; the smallest timestamp (then position) comes out first."""

    __slots__ = ("_heap",)

    def __init__(self, keys: Iterable[int] = ()) -> None:
        self._heap: list[int] = list(keys)
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, timestamp_ms: int, ledger_id: int, entry_id: int) -> None:
        heapq.heappush(self._heap, pack(timestamp_ms, ledger_id, entry_id))

    def add_key(self, key: int) -> None:
        heapq.heappush(self._heap, key)

    def add_keys(self, keys: Iterable[int]) -> None:
        heap = self._heap
        for key in keys:
            heapq.heappush(heap, key)

    def peek_key(self) -> int:
        """The smallest key; IndexError when empty."""
        return self._heap[0]

    def peek_timestamp(self) -> int:
        return self._heap[0] >> _TIMESTAMP_SHIFT

    def pop_key(self) -> int:
        return heapq.heappop(self._heap)

    def drain_sorted(self) -> list[int]:
        """Every key in ascending order; the queue is left empty."""
        keys, self._heap = self._heap, []
        keys.sort()
        return keys

    def __iter__(self) -> Iterator[int]:
        """The keys in heap (not sorted) order."""
        return iter(self._heap)

    def clear(self) -> None:
        self._heap = []

    def bytes_capacity(self) -> int:
        """Memory held: the list plus one int object per element (measured, not assumed)."""
        heap = self._heap
        if not heap:
            return sys.getsizeof(heap)
        return sys.getsizeof(heap) + len(heap) * sys.getsizeof(heap[0])
