"""The classic Key_Shared ordering rule: "recently joined consumers" with PIP-282's last sent position.

Used when ``subscriptionKeySharedUseClassicPersistentImplementation=true`` (AUTO_SPLIT
without ``allowOutOfOrderDelivery``). Modelled on Pulsar 3.x's
``PersistentStickyKeyDispatcherMultipleConsumers`` after PIP-282:

- The *last sent position* is a position such that every entry at or before it has
  been scheduled for sending. Entries sent out of order beyond it are kept as
  *individually sent positions*, ranges ``(lower, upper]``; when the first range
  touches the last sent position, the last sent position jumps to its upper end. The
  mark-delete position also pushes it forward (everything acked was sent).
- A consumer that joins while other consumers have unacknowledged messages is
  recorded with the last sent position at that moment (``lastSentPositionWhenJoining``).
  It may then receive only entries at or before that position, and for replays at or
  before the smallest such position of all recently joined consumers, until the
  mark-delete position reaches its joining position.

Seed 003 shows both races that using the *read* position instead let through; the
last sent position closes them because every entry at or before it has already gone
to some consumer.

Positions beyond the ledger boundary need the ledger's help (the entry before the
first one of a ledger is the last one of the previous ledger): a ``LedgerNavigator``
answers that. ``CONTIGUOUS_ENTRIES`` treats entry ids as consecutive within a ledger
and never crosses ledgers, which only delays the last sent position, never advances it
too far.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from magnetar.core.key_shared.hash_ranges import describe_consumer
from magnetar.core.positions import Position

C = TypeVar("C", bound=Hashable)


class LedgerNavigator(Protocol):
    def previous_position(self, position: Position) -> Position:
        """The position just before ``position`` (which need not hold an entry)."""
        ...

    def next_position(self, position: Position) -> Position:
        """The first position after ``position`` that holds, or will hold, an entry."""
        ...


class _ContiguousEntries:
    def previous_position(self, position: Position) -> Position:
        return Position(position.ledger_id, position.entry_id - 1)

    def next_position(self, position: Position) -> Position:
        return Position(position.ledger_id, position.entry_id + 1)


#: Entry ids are consecutive inside a ledger; nothing is known across ledgers.
CONTIGUOUS_ENTRIES: LedgerNavigator = _ContiguousEntries()


class PositionRangeSet:
    """Disjoint ranges of positions ``(lower, upper]``; ranges that touch are joined."""

    __slots__ = ("_ranges",)

    def __init__(self) -> None:
        self._ranges: list[tuple[Position, Position]] = []

    def __len__(self) -> int:
        return len(self._ranges)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        return iter(list(self._ranges))

    def __str__(self) -> str:
        return "[" + ",".join(f"({lower}..{upper}]" for lower, upper in self._ranges) + "]"

    def add(self, lower: Position, upper: Position) -> None:
        """Add ``(lower, upper]``."""
        if not lower < upper:
            raise ValueError(f"empty range ({lower}..{upper}]")
        # the first range that can touch the new one is the first ending at or after ``lower``
        i = bisect_left(self._ranges, lower, key=lambda r: r[1])
        j = i
        while j < len(self._ranges) and self._ranges[j][0] <= upper:
            lower, upper = min(lower, self._ranges[j][0]), max(upper, self._ranges[j][1])
            j += 1
        self._ranges[i:j] = [(lower, upper)]

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        i = bisect_left(self._ranges, position, key=lambda r: r[1])
        if i < len(self._ranges) and self._ranges[i][0] < position:
            return self._ranges[i]
        return None

    def __contains__(self, position: object) -> bool:
        return isinstance(position, Position) and self.range_containing(position) is not None

    def first(self) -> tuple[Position, Position] | None:
        return self._ranges[0] if self._ranges else None

    def remove_at_most(self, position: Position) -> None:
        """Drop every position at or before ``position``."""
        i = bisect_left(self._ranges, position, key=lambda r: r[1])
        # ranges before i end before ``position``; range i may end exactly at it
        if i < len(self._ranges) and self._ranges[i][1] == position:
            i += 1
        del self._ranges[:i]
        if self._ranges and self._ranges[0][0] < position:
            self._ranges[0] = (position, self._ranges[0][1])

    def clear(self) -> None:
        self._ranges.clear()


class RecentlyJoinedConsumers(Generic[C]):
    def __init__(
        self, mark_delete_position: Position | None = None, navigator: LedgerNavigator = CONTIGUOUS_ENTRIES
    ) -> None:
        """``mark_delete_position``: the cursor's, when the dispatcher is created."""
        self._navigator = navigator
        self._last_sent: Position | None = None
        self._individually_sent = PositionRangeSet()
        self._mark_delete = mark_delete_position
        #: recently joined consumers in order of joining (so by joining position)
        self._joined: dict[C, Position] = {}
        #: ``lastSentPositionWhenJoining`` of every consumer that got one
        self._joining_positions: dict[C, Position] = {}

    # -- state ---------------------------------------------------------------

    @property
    def last_sent_position(self) -> Position | None:
        return self._last_sent

    @property
    def individually_sent_positions(self) -> PositionRangeSet:
        return self._individually_sent

    @property
    def recently_joined(self) -> dict[C, Position]:
        return dict(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._joined

    def last_sent_position_when_joining(self, consumer: C) -> Position | None:
        return self._joining_positions.get(consumer)

    # -- the mark-delete position --------------------------------------------

    def mark_delete_position_moved(self, mark_delete_position: Position) -> bool:
        """Note the cursor's mark-delete position; True if consumers stopped being "recently joined".

        When it returns True the dispatcher should read more: held-back messages may flow.
        """
        self._mark_delete = mark_delete_position
        self._update_last_sent_position()
        return self._remove_consumers_up_to_mark_delete()

    def _update_last_sent_position(self) -> Position | None:
        md = self._mark_delete
        if self._last_sent is not None and md is not None and md > self._last_sent:
            # everything acked was sent; entries sent beyond it may now join up with it
            self._last_sent = md
            self._advance_last_sent(md)
        return self._last_sent

    def _remove_consumers_up_to_mark_delete(self) -> bool:
        md = self._mark_delete
        if md is None or not self._joined:
            return False
        released = [c for c, joined_at in self._joined.items() if joined_at <= md]
        for consumer in released:
            del self._joined[consumer]
        return bool(released)

    # -- consumers -----------------------------------------------------------

    def consumer_added(
        self, consumer: C, consumer_count: int, entries_since_first_not_acked: int
    ) -> Position | None:
        """Record a joining consumer; returns its ``lastSentPositionWhenJoining`` (None before any send).

        It is held back only if others were there already (``consumer_count`` includes it)
        and messages are outstanding (more than one entry since the first unacked one).
        """
        joined_at = self._update_last_sent_position()
        if joined_at is None:
            return None
        self._joining_positions[consumer] = joined_at
        if consumer_count > 1 and entries_since_first_not_acked > 1:
            self._joined[consumer] = joined_at
        return joined_at

    def consumer_removed(self, consumer: C, remaining_consumers: int) -> bool:
        """Forget a consumer; True if that let other consumers stop being "recently joined"."""
        self._joined.pop(consumer, None)
        self._joining_positions.pop(consumer, None)
        if remaining_consumers == 1:
            self._joined.clear()
        elif remaining_consumers == 0:
            # rewinds and resets remove all consumers and then send everything again
            self._last_sent = None
            self._individually_sent.clear()
        return self._remove_consumers_up_to_mark_delete()

    # -- dispatching -----------------------------------------------------------

    def prepare_dispatch(self, acked_ranges: Iterable[tuple[Position, Position]] = ()) -> None:
        """Call before each dispatch round; the first one starts from the cursor's state.

        ``acked_ranges`` are the cursor's individually deleted ranges ``(lower, upper]``
        above the mark-delete position: acked means sent.
        """
        self._update_last_sent_position()
        if self._last_sent is None and self._mark_delete is not None:
            self._last_sent = self._mark_delete
            for lower, upper in acked_ranges:
                self._individually_sent.add(lower, upper)

    def max_last_sent_position(self, consumer: C, replay: bool) -> Position | None:
        """The last position ``consumer`` may receive, or None if it is not held back."""
        self._remove_consumers_up_to_mark_delete()
        limit = self._joined.get(consumer)
        if limit is None:
            return None
        if replay:
            # a replayed message may belong to an older joiner's backlog: respect the earliest
            earliest = next(iter(self._joined.values()))
            limit = min(limit, earliest)
        return limit

    def can_dispatch(self, consumer: C, position: Position, replay: bool) -> bool:
        limit = self.max_last_sent_position(consumer, replay)
        return limit is None or position <= limit

    def entries_sent(self, positions: Iterable[Position]) -> None:
        """Record the entries of one dispatch round and move the last sent position on."""
        last = self._last_sent
        for position in positions:
            if (last is None or position > last) and position not in self._individually_sent:
                self._individually_sent.add(self._navigator.previous_position(position), position)
        if last is not None:
            self._advance_last_sent(last)

    def _advance_last_sent(self, last: Position) -> None:
        sent = self._individually_sent
        first = sent.first()
        if first is not None and first[1] <= last:
            sent.remove_at_most(last)
            first = sent.first()
        if first is None:
            return
        lower, upper = first
        # the first range continues the last sent position if nothing lies between them
        if lower > last and self._navigator.next_position(last) <= lower:
            return
        new_last = upper
        following = sent.range_containing(self._navigator.next_position(new_last))
        while following is not None:
            new_last = following[1]
            following = sent.range_containing(self._navigator.next_position(new_last))
        self._last_sent = max(last, new_last)
        sent.remove_at_most(self._last_sent)

    # -- stats -----------------------------------------------------------------

    def consumers_after_mark_delete_position(
        self, address_of: Callable[[C], str | None] | None = None
    ) -> dict[str, str]:
        """The subscription stat ``consumersAfterMarkDeletePosition``: who is held back, up to where."""
        stats: dict[str, str] = {}
        for consumer, joined_at in self._joined.items():
            key = describe_consumer(consumer)
            address = address_of(consumer) if address_of is not None else None
            if address:
                key += f", address={address}"
            stats[key] = str(joined_at)
        return stats

    def individually_sent_positions_stat(self) -> str:
        """The subscription stat ``individuallySentPositions``, e.g. ``[(3:4..3:5],(3:7..3:10]]``."""
        return str(self._individually_sent)
