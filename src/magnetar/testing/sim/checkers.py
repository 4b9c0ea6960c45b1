"""Invariant checkers, kept apart from the system they judge.

They see only what a client and the schedule see: what was published (key and
order), what each consumer was sent, and what each application acknowledged or sent
back. Every subscription type is held to: an entry goes out only with permits, never
after it was acknowledged, never to a second consumer while one holds it, and at the
end everything published was delivered and acknowledged. Beyond that, each type
promises its own order (``Contract.order``):

* Exclusive and Failover (``SUBSCRIPTION_ORDER``): only the active consumer receives
  (Failover: the first by name among those connected, as magnetar documents it), and
  it sees the subscription in order: when an entry goes out, every earlier entry not
  yet acknowledged is outstanding at that consumer. A redelivery rewinds to the first
  unacknowledged entry, so this holds across nacks and hand-overs as well.
* Shared (``PUBLISH_ORDER``): no order per consumer, but entries are read in order,
  so a first delivery never overtakes an earlier entry that was never delivered.
* Key_Shared (``KEY_ORDER``): the contract of PIP-379:

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

A seek starts the subscription again: entries up to the new mark-delete position count
as consumed, everything after it as never delivered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from magnetar.core.positions import Position

KEY_ORDER = "key"
SUBSCRIPTION_ORDER = "subscription"
PUBLISH_ORDER = "publish"
#: entries of one order group share this key when order is not per key
WHOLE_SUBSCRIPTION = ""


@dataclass(frozen=True)
class Contract:
    #: entries sent back (by a nack, or because their consumer left) are exempt when they
    #: come again, and do not hold newer entries back: the classic mode's weaker promise
    redeliveries_exempt: bool = False
    #: keys may be anywhere at any time (allowOutOfOrderDelivery): only loss is checked
    unordered: bool = False
    #: what order is promised: per key, per subscription, or first deliveries in publish order
    order: str = KEY_ORDER
    #: one consumer at a time receives: the first connected by name (Failover) or the only one
    single_active: bool = False


PIP_379_CONTRACT = Contract()
CLASSIC_CONTRACT = Contract(redeliveries_exempt=True)
OUT_OF_ORDER_CONTRACT = Contract(unordered=True)
SINGLE_ACTIVE_CONTRACT = Contract(order=SUBSCRIPTION_ORDER, single_active=True)
SHARED_CONTRACT = Contract(order=PUBLISH_ORDER)


class Violation(Exception):
    """An invariant broke; the message says which, where and why."""


@dataclass(slots=True)
class EntryState:
    pos: Position
    key: str
    #: the order group: the key under Key_Shared, the whole subscription otherwise
    group: str
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
        #: connected consumers -> (the name the broker sees, join order): who is active
        self.connected: dict[str, tuple[str, int]] = {}
        self._joins = 0
        self.seeks = 0

    # -- what happened ---------------------------------------------------------
    def published(self, pos: Position, key: str, num_messages: int, delayed: bool = False) -> None:
        group = key if self.contract.order == KEY_ORDER else WHOLE_SUBSCRIPTION
        ks = self.keys.setdefault(group, KeyState())
        entry = EntryState(pos, key, group, len(ks.entries), num_messages, delayed=delayed)
        ks.entries.append(entry)
        self.entries[pos] = entry

    def consumer_joined(self, consumer: str, broker_name: str | None = None) -> None:
        self.outstanding[consumer] = set()
        self.permits[consumer] = 0
        self._joins += 1
        self.connected[consumer] = (broker_name or consumer, self._joins)

    def active(self) -> str | None:
        """The consumer that must be active on a single-active subscription: priority levels
        being equal, the first by name (ties: the first to join, as a stable sort leaves it)."""
        if not self.connected:
            return None
        return min(self.connected, key=lambda c: self.connected[c])

    def active_changed(self, consumer: str, is_active: bool) -> None:
        """The broker told a Failover consumer whether it is active. One told it no longer is
        lets go of what it holds: the broker hands that to the new active consumer."""
        expected = self.active()
        if is_active != (consumer == expected):
            raise Violation(f"{consumer} was told it is {'' if is_active else 'not '}active; "
                            f"the active consumer is {expected}")
        if not is_active:
            for pos in sorted(self.outstanding.get(consumer, set())):
                entry = self.entries[pos]
                self._release(entry)
                entry.returned = True

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
        ks = self.keys[entry.group]
        self._check_contract(consumer, entry, ks)
        entry.holder = consumer
        entry.nacked = entry.returned = False
        self.redeliveries += entry.deliveries > 0
        entry.deliveries += 1
        ks.holders[consumer] = ks.holders.get(consumer, 0) + 1
        self.outstanding.setdefault(consumer, set()).add(pos)
        self.deliveries += 1

    def _check_contract(self, consumer: str, entry: EntryState, ks: KeyState) -> None:
        contract = self.contract
        if contract.single_active and consumer != self.active():
            raise Violation(f"{entry.pos} sent to {consumer} while the active consumer is {self.active()}")
        if contract.order == SUBSCRIPTION_ORDER:
            self._check_subscription_order(consumer, entry, ks)
        elif contract.order == PUBLISH_ORDER:
            if not entry.deliveries and not entry.delayed:
                self._check_publish_order(consumer, entry, ks)
        elif not contract.unordered and not (contract.redeliveries_exempt and (entry.nacked or entry.returned)):
            self._check_ownership(consumer, entry, ks)
            if not entry.delayed:
                self._check_order(consumer, entry, ks)

    def _check_subscription_order(self, consumer: str, entry: EntryState, ks: KeyState) -> None:
        """In order, without gaps: every earlier entry is acknowledged or already at ``consumer``."""
        for earlier in ks.entries[ks.first_open:entry.index]:
            if not earlier.acked and earlier.holder != consumer:
                where = f"outstanding at {earlier.holder}" if earlier.holder else "not outstanding"
                raise Violation(f"{entry.pos} sent to {consumer} before the earlier {earlier.pos}, "
                                f"which is {where}")

    def _check_publish_order(self, consumer: str, entry: EntryState, ks: KeyState) -> None:
        """A first delivery follows every earlier entry's first delivery (delayed ones aside)."""
        for earlier in ks.entries[ks.first_open:entry.index]:
            if not earlier.acked and not earlier.deliveries and not earlier.delayed:
                raise Violation(f"{entry.pos} sent to {consumer} for the first time before the earlier "
                                f"{earlier.pos} was ever delivered")

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
        self._move_first_open(self.keys[entry.group])

    @staticmethod
    def _move_first_open(ks: KeyState) -> None:
        while ks.first_open < len(ks.entries) and ks.entries[ks.first_open].acked:
            ks.first_open += 1

    def acked_up_to(self, consumer: str, pos: Position) -> None:
        """A cumulative acknowledgement: every entry up to ``pos``, whoever holds it."""
        for entry in list(self.entries.values()):
            if entry.pos <= pos and not entry.acked:
                self.acked(consumer, entry.pos)

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
        self.connected.pop(consumer, None)

    def seek(self, mark_delete: Position) -> None:
        """The subscription starts again after ``mark_delete`` (its consumers have left):
        earlier entries are consumed, later ones are as if never delivered."""
        self.seeks += 1
        for entry in self.entries.values():
            if entry.holder is not None:
                raise Violation(f"{entry.pos} still outstanding at {entry.holder} after a seek closed every consumer")
            if entry.pos <= mark_delete:
                entry.acked = True
                entry.acked_indexes = set(range(entry.num_messages))
            else:
                entry.acked = entry.nacked = entry.returned = False
                entry.acked_indexes = set()
                entry.deliveries = 0
        for ks in self.keys.values():
            ks.first_open = 0
            self._move_first_open(ks)

    def _release(self, entry: EntryState) -> None:
        holder = entry.holder
        if holder is None:
            return
        ks = self.keys[entry.group]
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
