"""Entries acknowledged out of order beyond a cursor's mark-delete position.

Pulsar's ManagedCursor keeps ``individuallyDeletedMessages`` as a range set; here each
ledger's acknowledged entry ids are a roaring bitmap, so a million scattered acks cost
a few bytes each, not a Python tuple and a set slot each, and the mark-delete position
moves over a contiguous run of acks in one step (a rank query and one range removal)
instead of one entry at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pyroaring import BitMap

from magnetar.core.positions import Position


class AckedPositions:
    def __init__(self) -> None:
        self._ledgers: dict[int, BitMap] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, pos: object) -> bool:
        if not self._count or not isinstance(pos, Position):
            return False
        entries = self._ledgers.get(pos.ledger_id)
        return entries is not None and 0 <= pos.entry_id < 1 << 32 and pos.entry_id in entries

    def __iter__(self) -> Iterator[Position]:
        for ledger_id in sorted(self._ledgers):
            for entry_id in self._ledgers[ledger_id]:
                yield Position(ledger_id, entry_id)

    def add(self, pos: Position) -> bool:
        """Remember ``pos``; False if it was already there."""
        entries = self._ledgers.setdefault(pos.ledger_id, BitMap())
        if pos.entry_id in entries:
            return False
        entries.add(pos.entry_id)
        self._count += 1
        return True

    def add_range(self, ledger_id: int, first_entry: int, last_entry: int) -> None:
        """Remember every entry from ``first_entry`` to ``last_entry`` of a ledger."""
        entries = self._ledgers.setdefault(ledger_id, BitMap())
        before = len(entries)
        entries.add_range(first_entry, last_entry + 1)
        self._count += len(entries) - before

    def discard_up_to(self, pos: Position) -> None:
        """Forget everything at or before ``pos`` (the mark-delete position moved there)."""
        for ledger_id in [lid for lid in self._ledgers if lid <= pos.ledger_id]:
            entries = self._ledgers[ledger_id]
            before = len(entries)
            if ledger_id < pos.ledger_id:
                del self._ledgers[ledger_id]
                self._count -= before
                continue
            if pos.entry_id >= 0:
                entries.remove_range(0, pos.entry_id + 1)
                self._count -= before - len(entries)
            if not entries:
                del self._ledgers[ledger_id]

    def take_run_from(self, start: Position) -> Position | None:
        """If ``start`` is acknowledged, forget it and the acknowledged entries right after
        it in its ledger; the last of them (where mark-delete can move), else None."""
        entries = self._ledgers.get(start.ledger_id)
        first = start.entry_id
        if entries is None or first < 0 or first not in entries:
            return None
        # the run ends at the largest `last` with every entry in [first, last] present
        low, high = first, entries.max()
        while low < high:
            mid = (low + high + 1) // 2
            if entries.range_cardinality(first, mid + 1) == mid + 1 - first:
                low = mid
            else:
                high = mid - 1
        entries.remove_range(first, low + 1)
        self._count -= low + 1 - first
        if not entries:
            del self._ledgers[start.ledger_id]
        return Position(start.ledger_id, low)

    def clear(self) -> None:
        self._ledgers.clear()
        self._count = 0

    def ranges(self) -> list[tuple[Position, Position]]:
        """Closed ranges of consecutive acknowledged entries, in position order."""
        out: list[tuple[Position, Position]] = []
        for ledger_id in sorted(self._ledgers):
            run_start = previous = -2
            for entry_id in self._ledgers[ledger_id]:
                if entry_id != previous + 1:
                    if run_start >= 0:
                        out.append((Position(ledger_id, run_start), Position(ledger_id, previous)))
                    run_start = entry_id
                previous = entry_id
            if run_start >= 0:
                out.append((Position(ledger_id, run_start), Position(ledger_id, previous)))
        return out

    @classmethod
    def of(cls, positions: Iterable[Position]) -> AckedPositions:
        acked = cls()
        for pos in positions:
            acked.add(pos)
        return acked
