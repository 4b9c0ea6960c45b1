"""The set of positions a tracker holds: one roaring bitmap of entry ids per ledger.

Pulsar 4.x's ``BucketDelayedMessageIndex``: the runtime truth of "accepted but not yet
handed out", with the count kept next to the bits so the two cannot drift. The trackers
answer ``contains_message`` from it, count ``msgDelayed`` with it, and use it to drop stale
copies of a position from their queues (a position is handed out only by the pop that
removes it from this index).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from pyroaring import BitMap

from magnetar.core.positions import Position

#: Memory a BitMap costs beyond its serialized size: the Python wrapper and CRoaring's
#: bitmap and container headers (measured with pyroaring 1.x as resident-set growth).
BITMAP_OVERHEAD_BYTES = 160


def bitmap_memory_bytes(bitmap: BitMap) -> int:
    """Estimated memory of one bitmap (``sys.getsizeof`` gives its serialized size)."""
    return sys.getsizeof(bitmap) + BITMAP_OVERHEAD_BYTES


class DelayedMessageIndex:
    """Positions as ``ledger id -> BitMap(entry ids)``, with an exact count."""

    __slots__ = ("_bitmaps", "_size")

    def __init__(self) -> None:
        self._bitmaps: dict[int, BitMap] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def track(self, ledger_id: int, entry_id: int) -> bool:
        """Add a position; False if it was already there."""
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None:
            bitmap = self._bitmaps[ledger_id] = BitMap()
        elif entry_id in bitmap:
            return False
        bitmap.add(entry_id)
        self._size += 1
        return True

    def untrack(self, ledger_id: int, entry_id: int) -> bool:
        """Remove a position; False if it was not there."""
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None or entry_id not in bitmap:
            return False
        bitmap.remove(entry_id)
        if not bitmap:
            del self._bitmaps[ledger_id]
        self._size -= 1
        return True

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        bitmap = self._bitmaps.get(ledger_id)
        return bitmap is not None and entry_id in bitmap

    def run_end(self, ledger_id: int, entry_id: int) -> int:
        """The last entry id of the unbroken run of tracked entries that starts at
        ``entry_id`` (``entry_id - 1`` when that one is not tracked).

        A reader can pass over the whole run at once: every entry in it is held. The run
        is found by galloping then bisecting with range checks, so a run of one costs one
        check and a run of n costs O(log n)."""
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None or entry_id not in bitmap:
            return entry_id - 1
        last = bitmap.max()
        known, step = entry_id, 1  # [entry_id, known] is tracked
        while known < last and bitmap.contains_range(entry_id, min(known + step, last) + 1):
            known = min(known + step, last)
            step *= 2
        if known == last:
            return last
        beyond = min(known + step, last)  # [entry_id, beyond] is not all tracked
        while beyond - known > 1:
            middle = (known + beyond) // 2
            if bitmap.contains_range(entry_id, middle + 1):
                known = middle
            else:
                beyond = middle
        return known

    def untrack_many(self, ledger_id: int, entry_ids: BitMap) -> BitMap:
        """Remove a set of entries of one ledger; returns those that were present."""
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None:
            return BitMap()
        present = bitmap & entry_ids
        if present:
            bitmap -= present
            self._size -= len(present)
            if not bitmap:
                del self._bitmaps[ledger_id]
        return present

    def restore(self, ledger_id: int, entry_ids: BitMap) -> None:
        """Merge a recovered bitmap in; overlapping bits are counted once."""
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None:
            bitmap = self._bitmaps[ledger_id] = BitMap()
        before = len(bitmap)
        bitmap |= entry_ids
        self._size += len(bitmap) - before

    def trim_up_to(self, position: Position) -> int:
        """Forget every position at or before ``position``; returns how many went."""
        removed = 0
        for ledger_id in [lid for lid in self._bitmaps if lid < position.ledger_id]:
            removed += len(self._bitmaps.pop(ledger_id))
        bitmap = self._bitmaps.get(position.ledger_id)
        if bitmap is not None and position.entry_id >= 0:
            before = len(bitmap)
            bitmap.remove_range(0, position.entry_id + 1)
            removed += before - len(bitmap)
            if not bitmap:
                del self._bitmaps[position.ledger_id]
        self._size -= removed
        return removed

    def ledgers(self) -> Iterator[tuple[int, BitMap]]:
        return iter(self._bitmaps.items())

    def clear(self) -> None:
        self._bitmaps = {}
        self._size = 0

    def memory_bytes(self) -> int:
        """Estimated memory of the bitmaps and the dict holding them."""
        return sys.getsizeof(self._bitmaps) + sum(bitmap_memory_bytes(b) for b in self._bitmaps.values())
