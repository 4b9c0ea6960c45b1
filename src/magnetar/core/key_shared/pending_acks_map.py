"""One consumer's delivered-but-unacknowledged entries (Pulsar 4.x ``PendingAcksMap``).

Each pending entry is a position (ledger id, entry id) with its batch size and sticky
key hash. Two hooks tie the map to Key_Shared without the map knowing about it:

- the *add handler* may refuse an entry (PIP-379 step 7): sending is allowed only if
  the entry could be added, which closes the race between a consumer change and a
  dispatch already in flight;
- the *remove handler* hears about every removal, so the draining-hashes tracker stays
  in step with the map; bulk removals are bracketed by ``start_batch``/``end_batch`` so
  unblocking notifications can be coalesced.

A closed map (its consumer is going away) refuses every add.

Entries are usually added in position order, so each ledger's entries live in a dict
whose insertion order is position order; an out-of-order add (a redelivery) marks the
ledger unsorted and the next ordered walk re-sorts it once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, NamedTuple, Protocol, TypeVar

from magnetar.core.key_shared.sticky_key import MAX_STICKY_KEY_HASH

C = TypeVar("C", bound=Hashable)
C_contra = TypeVar("C_contra", contravariant=True)

# a pending entry's value packed in one int: batch size above, sticky key hash in the low bits
_HASH_BITS = 16
_HASH_MASK = (1 << _HASH_BITS) - 1
assert MAX_STICKY_KEY_HASH == _HASH_MASK


class PendingAck(NamedTuple):
    ledger_id: int
    entry_id: int
    batch_size: int
    sticky_key_hash: int


#: Decides whether an entry may be added: (consumer, ledger id, entry id, sticky key hash) -> allowed.
PendingAcksAddHandler = Callable[[C, int, int, int], bool]


class PendingAcksRemoveHandler(Protocol[C_contra]):
    def handle_removing(
        self, consumer: C_contra, ledger_id: int, entry_id: int, sticky_key_hash: int, closing: bool
    ) -> None: ...

    def start_batch(self) -> None: ...

    def end_batch(self) -> None: ...


class _LedgerAcks:
    __slots__ = ("entries", "last_entry_id", "ordered")

    def __init__(self) -> None:
        self.entries: dict[int, int] = {}
        self.last_entry_id = -1
        #: whether dict order is entry id order
        self.ordered = True

    def put(self, entry_id: int, packed: int) -> None:
        if entry_id not in self.entries:
            if entry_id < self.last_entry_id:
                self.ordered = False
            else:
                self.last_entry_id = entry_id
        self.entries[entry_id] = packed

    def in_order(self) -> dict[int, int]:
        if not self.ordered:
            self.entries = dict(sorted(self.entries.items()))
            self.ordered = True
        return self.entries


class PendingAcksMap(Generic[C]):
    def __init__(
        self,
        consumer: C,
        add_handler: PendingAcksAddHandler[C] | None = None,
        remove_handler: PendingAcksRemoveHandler[C] | None = None,
    ) -> None:
        self.consumer = consumer
        #: hooks may be set after construction, once the dispatcher knows the consumer
        self.add_handler = add_handler
        self.remove_handler = remove_handler
        self._ledgers: dict[int, _LedgerAcks] = {}
        self._size = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return self._size

    @property
    def size(self) -> int:
        return self._size

    def add(self, ledger_id: int, entry_id: int, batch_size: int, sticky_key_hash: int) -> bool:
        """Add an entry about to be sent; False: it must not be sent (Pulsar's addPendingAckIfAllowed)."""
        if not 0 <= sticky_key_hash <= MAX_STICKY_KEY_HASH or batch_size < 0:
            raise ValueError(f"invalid pending ack: batch size {batch_size}, hash {sticky_key_hash}")
        if self._closed:
            return False
        if self.add_handler is not None and not self.add_handler(
            self.consumer, ledger_id, entry_id, sticky_key_hash
        ):
            return False
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = _LedgerAcks()
        if entry_id not in ledger.entries:
            self._size += 1
        ledger.put(entry_id, (batch_size << _HASH_BITS) | sticky_key_hash)
        return True

    def get(self, ledger_id: int, entry_id: int) -> PendingAck | None:
        ledger = self._ledgers.get(ledger_id)
        packed = None if ledger is None else ledger.entries.get(entry_id)
        return None if packed is None else _unpack(ledger_id, entry_id, packed)

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        ledger = self._ledgers.get(ledger_id)
        return ledger is not None and entry_id in ledger.entries

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, tuple) or len(position) != 2:
            return False
        return self.contains(position[0], position[1])

    def remove(self, ledger_id: int, entry_id: int) -> bool:
        """Remove an acknowledged entry; False if it was not pending here."""
        return self.remove_and_get(ledger_id, entry_id) is not None

    def remove_and_get(self, ledger_id: int, entry_id: int) -> PendingAck | None:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return None
        packed = ledger.entries.pop(entry_id, None)
        if packed is None:
            return None
        self._size -= 1
        if not ledger.entries:
            del self._ledgers[ledger_id]
        ack = _unpack(ledger_id, entry_id, packed)
        handler = self.remove_handler
        if handler is not None:
            handler.handle_removing(self.consumer, ledger_id, entry_id, ack.sticky_key_hash, self._closed)
        return ack

    def remove_all_up_to(
        self, ledger_id: int, entry_id: int, removed: Callable[[PendingAck], None] | None = None
    ) -> int:
        """Remove every entry at or before a position (a cumulative ack); returns how many."""
        doomed: list[PendingAck] = []
        for ack in self._in_order():
            if (ack.ledger_id, ack.entry_id) > (ledger_id, entry_id):
                break
            doomed.append(ack)
        if not doomed:
            return 0
        handler = self.remove_handler
        if handler is not None:
            handler.start_batch()
        try:
            for ack in doomed:
                ledger = self._ledgers[ack.ledger_id]
                del ledger.entries[ack.entry_id]
                self._size -= 1
                if not ledger.entries:
                    del self._ledgers[ack.ledger_id]
                if handler is not None:
                    handler.handle_removing(self.consumer, ack.ledger_id, ack.entry_id, ack.sticky_key_hash,
                                            self._closed)
                if removed is not None:
                    removed(ack)
        finally:
            if handler is not None:
                handler.end_batch()
        return len(doomed)

    def _in_order(self) -> Iterator[PendingAck]:
        for ledger_id in sorted(self._ledgers):
            for entry_id, packed in self._ledgers[ledger_id].in_order().items():
                yield _unpack(ledger_id, entry_id, packed)

    def __iter__(self) -> Iterator[PendingAck]:
        """The pending entries in position order (a copy: the map may change meanwhile)."""
        return iter(list(self._in_order()))

    def for_each(self, processor: Callable[[PendingAck], None]) -> None:
        """Call ``processor`` on every pending entry in position order; the map is unchanged."""
        for ack in list(self._in_order()):
            processor(ack)

    def for_each_and_close(self, processor: Callable[[PendingAck], None]) -> None:
        """Hand every entry to ``processor`` and remove it, then refuse further adds (consumer leaving)."""
        self._for_each_and_clear(processor, close=True)

    def for_each_and_clear(self, processor: Callable[[PendingAck], None]) -> None:
        """Hand every entry to ``processor`` and remove it; adds stay allowed (a redelivery request)."""
        self._for_each_and_clear(processor, close=False)

    def _for_each_and_clear(self, processor: Callable[[PendingAck], None], close: bool) -> None:
        if close:
            self._closed = True
        acks = list(self._in_order())
        self._ledgers.clear()
        self._size = 0
        handler = self.remove_handler
        if handler is None:
            for ack in acks:
                processor(ack)
            return
        handler.start_batch()
        try:
            for ack in acks:
                # the processor runs first: it puts the entry in the replay queue before the
                # removal can unblock its hash, so the replayed copy keeps its place in line
                processor(ack)
                handler.handle_removing(self.consumer, ack.ledger_id, ack.entry_id, ack.sticky_key_hash,
                                        self._closed)
        finally:
            handler.end_batch()


def _unpack(ledger_id: int, entry_id: int, packed: int) -> PendingAck:
    return PendingAck(ledger_id, entry_id, packed >> _HASH_BITS, packed & _HASH_MASK)
