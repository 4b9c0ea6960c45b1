"""A subscription's cursor: mark-delete position, individually deleted entries, batch holes.

As ManagedCursor in Pulsar: everything at or before ``mark_delete`` is consumed;
entries acknowledged out of order beyond it are remembered individually until the
mark-delete position catches up. Partly acknowledged batches keep the ack set of
indexes still to deliver (java.util.BitSet word layout, as the clients send it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from magnetar.core.positions import Position
from magnetar.core.subscriptions.acked_positions import AckedPositions

NextPosition = Callable[[Position], Position]


@dataclass
class Cursor:
    name: str
    mark_delete: Position
    next_position: NextPosition
    durable: bool = True
    #: ``acknowledgmentAtBatchIndexLevelEnabled``: when off, an ack naming some indexes of a
    #: batch is ignored (and a cumulative one stops before that batch), as Pulsar's cursor
    #: does without deletion at batch-index level
    batch_index_acks: bool = True
    individually_deleted: AckedPositions = field(default_factory=AckedPositions)
    batch_ack_sets: dict[Position, list[int]] = field(default_factory=dict)
    properties: dict[str, int | str] = field(default_factory=dict)
    #: told of every change (the topic notes that it has a cursor to persist), so the
    #: periodic persist visits changed topics only, not every loaded one
    on_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    _version: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def version(self) -> int:
        """Bumped on every change so the shell knows when a persist is due."""
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value
        if self.on_change is not None:
            self.on_change()

    def is_acked(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos in self.individually_deleted

    def first_unacked(self) -> Position:
        return self.next_position(self.mark_delete)

    def ack(self, pos: Position, ack_set: list[int] | None = None) -> bool:
        """Individual ack; with an ack set only some batch indexes. True if state changed."""
        if self.is_acked(pos):
            return False
        if ack_set and any(ack_set):
            return self._ack_batch_indexes(pos, ack_set) if self.batch_index_acks else False
        self.batch_ack_sets.pop(pos, None)
        if pos.entry_id < 0:
            return False  # (L, -1) stands before ledger L's entries: nothing to ack
        if pos == self.next_position(self.mark_delete):
            self.mark_delete = pos  # the common case, acks in order: nothing to remember
        else:
            self.individually_deleted.add(pos)
        self._advance()
        self.version += 1
        return True

    def ack_cumulative(self, pos: Position, ack_set: list[int] | None = None) -> bool:
        """Everything up to ``pos`` (and the cleared indexes of ``pos`` when partial)."""
        if ack_set and any(ack_set):
            before = self._position_before(pos)
            moved = self._move_mark_delete(before) if before > self.mark_delete else False
            if not self.batch_index_acks:
                return moved
            return self._ack_batch_indexes(pos, ack_set) or moved
        if pos <= self.mark_delete:
            return False
        self._move_mark_delete(pos)
        return True

    def reset(self, mark_delete: Position) -> None:
        """Seek: forget every ack beyond the new mark-delete position."""
        self.mark_delete = mark_delete
        self.individually_deleted.clear()
        self.batch_ack_sets.clear()
        self.version += 1

    def remaining_ack_set(self, pos: Position) -> list[int] | None:
        return self.batch_ack_sets.get(pos)

    def deleted_ranges(self) -> list[tuple[Position, Position]]:
        """Individually deleted entries as closed ranges of consecutive entries per ledger."""
        return self.individually_deleted.ranges()

    def restore_ranges(self, ranges: Iterable[tuple[Position, Position]]) -> None:
        for start, end in ranges:
            if end.entry_id >= max(start.entry_id, 0):
                self.individually_deleted.add_range(start.ledger_id, max(start.entry_id, 0), end.entry_id)
        self.individually_deleted.discard_up_to(self.mark_delete)
        self._advance()

    def _ack_batch_indexes(self, pos: Position, ack_set: list[int]) -> bool:
        previous = self.batch_ack_sets.get(pos)
        merged = list(ack_set) if previous is None else and_words(previous, ack_set)
        if not any(merged):
            return self.ack(pos)
        if merged == previous:
            return False
        self.batch_ack_sets[pos] = merged
        self.version += 1
        return True

    def _move_mark_delete(self, pos: Position) -> bool:
        self.mark_delete = pos
        self.individually_deleted.discard_up_to(pos)
        self.batch_ack_sets = {p: s for p, s in self.batch_ack_sets.items() if p > pos}
        self._advance()
        self.version += 1
        return True

    def _advance(self) -> None:
        """Move mark-delete over the acknowledged run right after it, a run (and a
        ledger boundary) at a time."""
        while self.individually_deleted:
            end = self.individually_deleted.take_run_from(self.next_position(self.mark_delete))
            if end is None:
                return
            self.mark_delete = end

    @staticmethod
    def _position_before(pos: Position) -> Position:
        """(L, -1) stands before every entry of ledger L, as in Pulsar."""
        return Position(pos.ledger_id, pos.entry_id - 1)


def and_words(a: list[int], b: list[int]) -> list[int]:
    """Indexes still unacked are those unacked in both sets."""
    width = max(len(a), len(b))
    a = a + [0] * (width - len(a))
    b = b + [0] * (width - len(b))
    return [x & y for x, y in zip(a, b, strict=True)]
