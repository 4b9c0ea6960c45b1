"""Hashes that must drain at one consumer before another may receive them (PIP-379).

Pulsar 4.x ``DrainingHashesTracker``. When a consumer loses hashes it still has pending
messages for, each such hash is registered here as *draining at* that consumer with a
reference count: the number of its pending messages with that hash. Until the count
drops to zero (acks, or the consumer leaving), delivering the hash to any other
consumer is blocked, and each blocked attempt is counted. A hash that comes back to
its draining consumer is released lazily, on the next delivery attempt there.

When a hash that blocked somebody is cleared, the dispatcher must retry blocked
deliveries. Like Pulsar's ``keySharedUnblockingIntervalMs``, clears are coalesced:
the first one arms a deadline ``unblocking_interval_ms`` ahead and later ones ride
along. The tracker keeps no timer; the dispatcher asks ``next_unblock_deadline_ms`` and
``poll_unblocked`` with the current time. Clears during ``start_batch``/``end_batch``
(a consumer's pending acks removed in bulk) count once, at the end of the batch.
Clears caused by a consumer closing notify nobody: removing a consumer reads anyway.

Memory: the state of a hash lives in pages of 256 hashes (three arrays of 32-bit
counters each, about 3 KB), allocated when the first hash of the page starts draining
and freed when the last one clears. All 65,535 hashes draining cost under 1 MB; an
idle tracker costs almost nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from pyroaring import BitMap

from magnetar.core.key_shared.sticky_key import MAX_STICKY_KEY_HASH, STICKY_KEY_HASH_NOT_SET

C = TypeVar("C", bound=Hashable)

#: Pulsar's default ``keySharedUnblockingIntervalMs``.
DEFAULT_UNBLOCKING_INTERVAL_MS = 10

_PAGE_BITS = 8
_PAGE_SIZE = 1 << _PAGE_BITS
_PAGE_MASK = _PAGE_SIZE - 1
_ZERO_PAGE = bytes(4 * _PAGE_SIZE)


class DrainingHashEntry(NamedTuple, Generic[C]):
    """A hash's draining state: where it drains, its pending messages, blocked attempts."""

    consumer: C
    ref_count: int
    blocked_count: int


@dataclass(frozen=True, slots=True)
class DrainingHash:
    hash: int
    unack_msgs: int
    blocked_attempts: int

    def to_json(self) -> dict[str, int]:
        return {"hash": self.hash, "unackMsgs": self.unack_msgs, "blockedAttempts": self.blocked_attempts}


@dataclass(frozen=True, slots=True)
class DrainingHashesStats:
    """A consumer's draining-hash stats (consumer level), or the totals (subscription level)."""

    draining_hashes_count: int = 0
    draining_hashes_cleared_total: int = 0
    draining_hashes_unacked_messages: int = 0
    #: per hash details, at consumer level only
    draining_hashes: tuple[DrainingHash, ...] = ()

    def to_json(self, with_hashes: bool = True) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "drainingHashesCount": self.draining_hashes_count,
            "drainingHashesClearedTotal": self.draining_hashes_cleared_total,
            "drainingHashesUnackedMessages": self.draining_hashes_unacked_messages,
        }
        if with_hashes:
            stats["drainingHashes"] = [h.to_json() for h in self.draining_hashes]
        return stats


class _Page:
    """The state of 256 consecutive hashes; slot 0 means "not draining"."""

    __slots__ = ("slot", "ref_count", "blocked", "used")

    def __init__(self) -> None:
        self.slot = array("I", _ZERO_PAGE)
        self.ref_count = array("I", _ZERO_PAGE)
        self.blocked = array("I", _ZERO_PAGE)
        self.used = 0


class _ConsumerDraining(Generic[C]):
    """Per consumer: its slot number, the hashes draining at it, hashes cleared so far."""

    __slots__ = ("consumer", "slot", "hashes", "cleared_total")

    def __init__(self, consumer: C, slot: int) -> None:
        self.consumer = consumer
        self.slot = slot
        self.hashes = BitMap()
        self.cleared_total = 0


class DrainingHashesTracker(Generic[C]):
    def __init__(
        self,
        unblocking_interval_ms: int = DEFAULT_UNBLOCKING_INTERVAL_MS,
        unblocking_handler: Callable[[int], None] | None = None,
    ) -> None:
        """``unblocking_handler``, if given, hears each unblocked hash at once (-1 for a batch)."""
        if unblocking_interval_ms < 0:
            raise ValueError(f"unblocking_interval_ms must be >= 0, got {unblocking_interval_ms}")
        self.unblocking_interval_ms = unblocking_interval_ms
        self._unblocking_handler = unblocking_handler
        self._pages: dict[int, _Page] = {}
        self._count = 0
        self._consumers: dict[C, _ConsumerDraining[C]] = {}
        #: index = slot; slot 0 is never used
        self._slots: list[_ConsumerDraining[C] | None] = [None]
        self._free_slots: list[int] = []
        self._batch_level = 0
        self._unblocked_while_batching = False
        self._unblock_pending = False
        self._unblock_deadline_ms: int | None = None

    # -- lookups -----------------------------------------------------------

    def __len__(self) -> int:
        """How many hashes are draining."""
        return self._count

    def __contains__(self, sticky_key_hash: object) -> bool:
        return isinstance(sticky_key_hash, int) and self._find(sticky_key_hash) is not None

    def _find(self, sticky_key_hash: int) -> tuple[_Page, int] | None:
        page = self._pages.get(sticky_key_hash >> _PAGE_BITS)
        if page is None:
            return None
        i = sticky_key_hash & _PAGE_MASK
        return (page, i) if page.slot[i] else None

    def get_entry(self, sticky_key_hash: int) -> DrainingHashEntry[C] | None:
        """The draining state of a hash, or None if it is not draining."""
        found = self._find(sticky_key_hash)
        if found is None:
            return None
        page, i = found
        owner = self._slots[page.slot[i]]
        assert owner is not None
        return DrainingHashEntry(owner.consumer, page.ref_count[i], page.blocked[i])

    def draining_consumer(self, sticky_key_hash: int) -> C | None:
        """The consumer a hash is draining at, or None."""
        found = self._find(sticky_key_hash)
        if found is None:
            return None
        owner = self._slots[found[0].slot[found[1]]]
        assert owner is not None
        return owner.consumer

    # -- registering -------------------------------------------------------

    def _state_of(self, consumer: C) -> _ConsumerDraining[C]:
        state = self._consumers.get(consumer)
        if state is None:
            slot = self._free_slots.pop() if self._free_slots else len(self._slots)
            state = _ConsumerDraining(consumer, slot)
            if slot == len(self._slots):
                self._slots.append(state)
            else:
                self._slots[slot] = state
            self._consumers[consumer] = state
        return state

    def add_entry(self, consumer: C, sticky_key_hash: int) -> None:
        """Count one more pending message of ``consumer`` with a hash it no longer owns.

        Raises if the hash is already draining at another consumer: one hash can be
        pending at only one consumer at a time.
        """
        if not STICKY_KEY_HASH_NOT_SET < sticky_key_hash <= MAX_STICKY_KEY_HASH:
            raise ValueError(f"invalid sticky key hash {sticky_key_hash}")
        found = self._find(sticky_key_hash)
        if found is not None:
            page, i = found
            state = self._consumers.get(consumer)
            if state is None or page.slot[i] != state.slot:
                holder = self.draining_consumer(sticky_key_hash)
                raise RuntimeError(
                    f"hash {sticky_key_hash} is already draining at {holder!r}, not at {consumer!r}"
                )
        else:
            state = self._state_of(consumer)
            page_number = sticky_key_hash >> _PAGE_BITS
            if page_number not in self._pages:
                self._pages[page_number] = _Page()
            page = self._pages[page_number]
            i = sticky_key_hash & _PAGE_MASK
            page.slot[i] = state.slot
            page.used += 1
            self._count += 1
            state.hashes.add(sticky_key_hash)
        page.ref_count[i] += 1

    def register_pending_hashes(self, consumer: C, pending_hashes: Iterable[int]) -> None:
        """Register, in one go, a consumer's pending messages whose hashes it just lost.

        ``pending_hashes`` has one item per pending message. Hashes already draining at
        this consumer are skipped: their count already covers every pending message of
        theirs, because no message of a draining hash is added at its consumer before
        the hash is released. Counting them again (as a second registration of the
        same pending messages would) would leave the hash blocked forever.
        """
        counts: dict[int, int] = {}
        for sticky_key_hash in pending_hashes:
            counts[sticky_key_hash] = counts.get(sticky_key_hash, 0) + 1
        for sticky_key_hash, n in counts.items():
            existing = self.draining_consumer(sticky_key_hash)
            if existing is not None and existing == consumer:
                continue
            for _ in range(n):
                self.add_entry(consumer, sticky_key_hash)

    def handle_adding_pending_ack(self, consumer: C, sticky_key_hash: int) -> bool:
        """The draining half of the pending-acks add hook (PIP-379 step 7).

        Refuses a hash draining at another consumer. If it drains at ``consumer`` itself
        (the hash moved away after the message was picked for it), the message is
        counted in, so the hash cannot clear while that message is still pending.
        """
        found = self._find(sticky_key_hash)
        if found is None:
            return True
        page, i = found
        state = self._consumers.get(consumer)
        if state is None or page.slot[i] != state.slot:
            return False
        page.ref_count[i] += 1
        return True

    # -- releasing ---------------------------------------------------------

    def _clear(self, page: _Page, i: int, sticky_key_hash: int) -> _ConsumerDraining[C]:
        owner = self._slots[page.slot[i]]
        assert owner is not None
        page.slot[i] = 0
        page.ref_count[i] = 0
        page.blocked[i] = 0
        page.used -= 1
        if page.used == 0:
            del self._pages[sticky_key_hash >> _PAGE_BITS]
        self._count -= 1
        owner.hashes.discard(sticky_key_hash)
        owner.cleared_total += 1
        return owner

    def reduce_ref_count(self, consumer: C, sticky_key_hash: int, closing: bool = False) -> None:
        """One pending message of ``consumer`` with this hash is gone (acked, or the consumer closed)."""
        found = self._find(sticky_key_hash)
        if found is None:
            return
        page, i = found
        state = self._consumers.get(consumer)
        if state is None or page.slot[i] != state.slot:
            raise RuntimeError(
                f"hash {sticky_key_hash} is draining at {self.draining_consumer(sticky_key_hash)!r},"
                f" not at {consumer!r}"
            )
        page.ref_count[i] -= 1
        if page.ref_count[i] > 0:
            return
        was_blocking = page.blocked[i] > 0
        self._clear(page, i, sticky_key_hash)
        if was_blocking and not closing:
            if self._batch_level > 0:
                self._unblocked_while_batching = True
            else:
                self._notify_unblocked(sticky_key_hash)

    def should_block_sticky_key_hash(self, consumer: C, sticky_key_hash: int) -> bool:
        """Whether delivering this hash to ``consumer`` must wait; counts the blocked attempt.

        A hash draining at ``consumer`` itself has come back to it: it is released here.
        """
        found = self._find(sticky_key_hash)
        if found is None:
            return False
        page, i = found
        state = self._consumers.get(consumer)
        if state is not None and page.slot[i] == state.slot:
            self._clear(page, i, sticky_key_hash)
            return False
        page.blocked[i] += 1
        return True

    def start_batch(self) -> None:
        self._batch_level += 1

    def end_batch(self) -> None:
        if self._batch_level == 0:
            raise RuntimeError("end_batch without start_batch")
        self._batch_level -= 1
        if self._batch_level == 0 and self._unblocked_while_batching:
            self._unblocked_while_batching = False
            self._notify_unblocked(-1)

    def consumer_removed(self, consumer: C) -> None:
        """Forget a consumer that left; any hash still draining at it is released."""
        state = self._consumers.pop(consumer, None)
        if state is None:
            return
        for sticky_key_hash in list(state.hashes):
            found = self._find(sticky_key_hash)
            if found is not None:
                self._clear(*found, sticky_key_hash)
                self._notify_unblocked(sticky_key_hash)
        self._slots[state.slot] = None
        self._free_slots.append(state.slot)

    def clear(self) -> None:
        self._pages.clear()
        self._count = 0
        self._consumers.clear()
        self._slots = [None]
        self._free_slots.clear()

    # -- unblocking notifications ------------------------------------------

    def _notify_unblocked(self, sticky_key_hash: int) -> None:
        self._unblock_pending = True
        if self._unblocking_handler is not None:
            self._unblocking_handler(sticky_key_hash)

    @property
    def unblock_pending(self) -> bool:
        """Whether a hash that blocked a delivery has cleared since the last ``poll_unblocked``."""
        return self._unblock_pending

    def next_unblock_deadline_ms(self, now_ms: int) -> int | None:
        """When blocked deliveries should be retried, or None if nothing unblocked.

        The first call after an unblock arms the deadline ``unblocking_interval_ms``
        after ``now_ms``; unblocks before it fires share it.
        """
        if not self._unblock_pending:
            return None
        if self._unblock_deadline_ms is None:
            self._unblock_deadline_ms = now_ms + self.unblocking_interval_ms
        return self._unblock_deadline_ms

    def poll_unblocked(self, now_ms: int) -> bool:
        """True (once) when the unblock deadline has come: time to retry blocked deliveries."""
        deadline = self.next_unblock_deadline_ms(now_ms)
        if deadline is None or deadline > now_ms:
            return False
        self._unblock_pending = False
        self._unblock_deadline_ms = None
        return True

    # -- stats -------------------------------------------------------------

    def draining_hashes_of(self, consumer: C) -> Iterator[DrainingHash]:
        state = self._consumers.get(consumer)
        if state is None:
            return
        for sticky_key_hash in state.hashes:
            page = self._pages[sticky_key_hash >> _PAGE_BITS]
            i = sticky_key_hash & _PAGE_MASK
            yield DrainingHash(sticky_key_hash, page.ref_count[i], page.blocked[i])

    def consumer_stats(self, consumer: C) -> DrainingHashesStats:
        """``drainingHashesCount``, ``…ClearedTotal``, ``…UnackedMessages``, ``drainingHashes``."""
        state = self._consumers.get(consumer)
        if state is None:
            return DrainingHashesStats()
        hashes = tuple(self.draining_hashes_of(consumer))
        return DrainingHashesStats(
            draining_hashes_count=len(hashes),
            draining_hashes_cleared_total=state.cleared_total,
            draining_hashes_unacked_messages=sum(h.unack_msgs for h in hashes),
            draining_hashes=hashes,
        )

    def subscription_stats(self) -> DrainingHashesStats:
        """The subscription-level totals over the consumers currently connected."""
        count = cleared = unacked = 0
        for consumer, state in self._consumers.items():
            count += len(state.hashes)
            cleared += state.cleared_total
            unacked += sum(h.unack_msgs for h in self.draining_hashes_of(consumer))
        return DrainingHashesStats(count, cleared, unacked)
