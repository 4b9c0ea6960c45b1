"""Invariant checkers, kept apart from the system they judge.

They see only what a client and the schedule see: what was published (key and
order), what each consumer was sent, and what each application acknowledged or sent
back. From that alone they check the Key_Shared contract of PIP-379:

1. single ownership: a key is outstanding (sent, neither acknowledged nor sent back)
   at one consumer at most, and an entry is never sent to a consumer still holding it;
2. order: when an entry of a key is sent to a consumer, every earlier entry of that
   key is acknowledged, outstanding at that same consumer, or was sent back by the
   application (a nack or redeliver request: the contract gives up order there);
3. nothing lost: at the end every published entry was delivered and acknowledged.

Flow control is checked as well: an entry goes only to a consumer with permits left.
Entries published with a delivery time are exempt from order (delayed delivery reorders
by design) but not from single ownership.

The classic mode promises less than PIP-379 (``CLASSIC_CONTRACT``): an entry sent back
(by a nack, or because its consumer left) may, when it comes again, reach a new owner
while older entries of its key are still pending elsewhere, or arrive after newer ones.
First deliveries are held to the full contract in both modes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from magnetar.core.positions import Position


@dataclass(frozen=True)
class Contract:
    #: entries sent back (by a nack, or because their consumer left) are exempt when they
    #: come again, and do not hold newer entries back: the classic mode's weaker promise
    redeliveries_exempt: bool = False
    #: keys may be anywhere at any time (allowOutOfOrderDelivery): only loss is checked
    unordered: bool = False


PIP_379_CONTRACT = Contract()
CLASSIC_CONTRACT = Contract(redeliveries_exempt=True)
OUT_OF_ORDER_CONTRACT = Contract(unordered=True)


class Violation(Exception):
    """An invariant broke; the message says which, where and why."""


@dataclass(slots=True)
class EntryState:
    pos: Position
    key: str
    index: int
    num_messages: int
    holder: str | None = None
    acked: bool = False
    acked_indexes: set[int] = field(default_factory=set)
    #: sent back by the application and not delivered since
    nacked: bool = False
    #: sent back because its consumer left, and not delivered since
    returned: bool = False
    deliveries: int = 0
    #: published with a delivery time: delayed delivery gives up its order, not its ownership
    delayed: bool = False


@dataclass(slots=True)
class KeyState:
    entries: list[EntryState] = field(default_factory=list)
    #: index of the first entry not acknowledged
    first_open: int = 0
    #: consumer -> number of this key's entries outstanding there
    holders: dict[str, int] = field(default_factory=dict)


class ContractChecker:
    def __init__(self, contract: Contract = PIP_379_CONTRACT) -> None:
        self.contract = contract
        self.entries: dict[Position, EntryState] = {}
        self.keys: dict[str, KeyState] = {}
        #: consumer -> positions outstanding there
        self.outstanding: dict[str, set[Position]] = {}
        #: consumer -> permits the client granted and has not yet seen used
        self.permits: dict[str, int] = {}
        self.deliveries = 0
        self.redeliveries = 0

    # -- what happened ---------------------------------------------------------
    def published(self, pos: Position, key: str, num_messages: int, delayed: bool = False) -> None:
        ks = self.keys.setdefault(key, KeyState())
        entry = EntryState(pos, key, len(ks.entries), num_messages, delayed=delayed)
        ks.entries.append(entry)
        self.entries[pos] = entry

    def consumer_joined(self, consumer: str) -> None:
        self.outstanding[consumer] = set()
        self.permits[consumer] = 0

    def flow(self, consumer: str, permits: int) -> None:
        self.permits[consumer] = self.permits.get(consumer, 0) + permits

    def delivered(self, consumer: str, pos: Position, messages: int) -> None:
        entry = self.entries.get(pos)
        if entry is None:
            raise Violation(f"{pos} sent to {consumer} was never published")
        if self.permits.get(consumer, 0) <= 0:
            raise Violation(f"{pos} sent to {consumer}, which has no permits left")
        self.permits[consumer] -= messages
        if entry.acked:
            raise Violation(f"{pos} (key {entry.key}) sent to {consumer} after it was acknowledged")
        if entry.holder is not None:
            raise Violation(f"{pos} (key {entry.key}) sent to {consumer} while outstanding at {entry.holder}")
        ks = self.keys[entry.key]
        exempt = self.contract.redeliveries_exempt and (entry.nacked or entry.returned)
        if not self.contract.unordered and not exempt:
            self._check_ownership(consumer, entry, ks)
            if not entry.delayed:
                self._check_order(consumer, entry, ks)
        entry.holder = consumer
        entry.nacked = entry.returned = False
        self.redeliveries += entry.deliveries > 0
        entry.deliveries += 1
        ks.holders[consumer] = ks.holders.get(consumer, 0) + 1
        self.outstanding.setdefault(consumer, set()).add(pos)
        self.deliveries += 1

    def _check_ownership(self, consumer: str, entry: EntryState, ks: KeyState) -> None:
        others = [c for c, n in ks.holders.items() if n and c != consumer]
        if not others:
            return
        held = [e.pos for e in ks.entries[ks.first_open:] if e.holder in others]
        raise Violation(
            f"key {entry.key}: {entry.pos} sent to {consumer} while {others[0]} holds {_fmt(held)} of that key")

    def _check_order(self, consumer: str, entry: EntryState, ks: KeyState) -> None:
        for earlier in ks.entries[ks.first_open:entry.index]:
            if earlier.acked or earlier.holder == consumer or earlier.nacked or earlier.delayed:
                continue
            if earlier.returned and self.contract.redeliveries_exempt:
                continue
            where = (f"outstanding at {earlier.holder}" if earlier.holder else
                     "sent back when its consumer left" if earlier.returned else
                     "never delivered" if not earlier.deliveries else "waiting")
            raise Violation(
                f"key {entry.key}: {entry.pos} sent to {consumer} before the earlier {earlier.pos}, which is {where}")

    def acked(self, consumer: str, pos: Position, indexes: Iterable[int] | None = None) -> None:
        """The application acknowledged the entry (or only some of its batch indexes)."""
        entry = self.entries[pos]
        if indexes is None:
            entry.acked_indexes = set(range(entry.num_messages))
        else:
            entry.acked_indexes.update(indexes)
        if len(entry.acked_indexes) < entry.num_messages or entry.acked:
            return
        entry.acked = True
        self._release(entry)
        ks = self.keys[entry.key]
        while ks.first_open < len(ks.entries) and ks.entries[ks.first_open].acked:
            ks.first_open += 1

    def sent_back(self, consumer: str, pos: Position) -> None:
        """The application asked for the entry again (nack or redeliverUnacknowledgedMessages)."""
        entry = self.entries[pos]
        if entry.holder == consumer:
            self._release(entry)
            entry.nacked = True

    def consumer_left(self, consumer: str) -> None:
        for pos in sorted(self.outstanding.pop(consumer, set())):
            entry = self.entries[pos]
            self._release(entry)
            entry.returned = True
        self.permits.pop(consumer, None)

    def _release(self, entry: EntryState) -> None:
        holder = entry.holder
        if holder is None:
            return
        ks = self.keys[entry.key]
        ks.holders[holder] -= 1
        if not ks.holders[holder]:
            del ks.holders[holder]
        self.outstanding.get(holder, set()).discard(entry.pos)
        entry.holder = None

    # -- the end ----------------------------------------------------------------
    def undelivered(self) -> list[Position]:
        """Entries never delivered and never consumed otherwise (message TTL consumes without delivery)."""
        return sorted(p for p, e in self.entries.items() if not e.deliveries and not e.acked)

    def unacked(self) -> list[Position]:
        return sorted(p for p, e in self.entries.items() if not e.acked)

    def check_drained(self) -> None:
        never = self.undelivered()
        if never:
            raise Violation(f"lost: {len(never)} entries never delivered, first {_fmt(never)}")
        open_ = self.unacked()
        if open_:
            raise Violation(f"stuck: {len(open_)} entries never acknowledged, first {_fmt(open_)}")


def _fmt(positions: list[Position], limit: int = 5) -> str:
    text = ", ".join(str(p) for p in positions[:limit])
    return text + (", ..." if len(positions) > limit else "")
