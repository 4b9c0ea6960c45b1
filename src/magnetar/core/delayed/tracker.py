"""The delayed-delivery tracker interface the dispatcher calls.

Pulsar's ``DelayedDeliveryTracker`` and the time rules of ``AbstractDelayedDeliveryTracker``.
A Shared or Key_Shared dispatcher hands every message that carries ``deliver_at_time`` to
``add_message``; a True answer means "hold it, the tracker will give it back", False means
"deliver it now". Due positions come back from ``get_scheduled_messages`` and are read
again from the ledger (replay) for dispatch.

Time is an argument (``now_ms``), never read here. The shell arms one timer for
``next_delivery_time_ms()`` and, when it fires, asks the dispatcher to read more. Like
Pulsar, the shell should not fire more often than once per tick
(``delayedDeliveryTickTimeMillis``): arm at ``max(next_delivery_time_ms(), last_fire_ms +
tick_time_ms)``.

Tick semantics (``isDelayedDeliveryDeliverAtTimeStrict``):

- not strict (default): the cutoff is ``now + tick``, so a message may be handed out up to
  one tick early, and one that is due within a tick is not held at all;
- strict: the cutoff is ``now``; a message is never early and, with the timer throttled to
  one fire per tick, at most about two ticks late.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from magnetar.core.delayed.delayed_message_index import DelayedMessageIndex
from magnetar.core.positions import Position

#: Pulsar's ``delayedDeliveryTickTimeMillis`` default.
DEFAULT_TICK_TIME_MS = 1000
#: Largest entry id the bitmap indexes hold (32-bit roaring bitmaps, as Pulsar's snapshots).
MAX_ENTRY_ID = (1 << 32) - 1
#: Ledger ids are unsigned 64-bit on the wire.
MAX_LEDGER_ID = (1 << 64) - 1


def cutoff_time_ms(now_ms: int, tick_time_ms: int, strict: bool) -> int:
    """The latest delivery time that counts as due at ``now_ms``."""
    return now_ms if strict else now_ms + tick_time_ms


def check_position(ledger_id: int, entry_id: int) -> None:
    """Reject ids the compact indexes cannot hold; the caller passed a position no ledger makes."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} is outside 0..2^64-1")
    if not 0 <= entry_id <= MAX_ENTRY_ID:
        raise ValueError(f"entry id {entry_id} is outside 0..2^32-1; delayed-delivery indexes hold 32-bit entry ids")


class IndexedTracker:
    """What the in-memory and the bucket tracker answer alike: the tick's time rules, and
    what their position index (:class:`DelayedMessageIndex`) tells on its own."""

    _index: DelayedMessageIndex
    _tick_time_ms: int
    _strict: bool

    @property
    def tick_time_ms(self) -> int:
        return self._tick_time_ms

    def reset_tick_time(self, tick_time_ms: int) -> None:
        self._tick_time_ms = tick_time_ms

    def _cutoff(self, now_ms: int) -> int:
        return cutoff_time_ms(now_ms, self._tick_time_ms, self._strict)

    def contains_message(self, ledger_id: int, entry_id: int) -> bool:
        return self._index.contains(ledger_id, entry_id)

    def held_run_end(self, ledger_id: int, entry_id: int) -> int:
        return self._index.run_end(ledger_id, entry_id)

    @property
    def number_of_delayed_messages(self) -> int:
        return len(self._index)


@runtime_checkable
class DelayedDeliveryTracker(Protocol):
    """What a dispatcher needs from a delayed-delivery index (per subscription or shared)."""

    def add_message(self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int) -> bool:
        """Track a message; False means it is already due (or not delayed): deliver it now."""
        ...

    def has_message_available(self, now_ms: int) -> bool:
        """True when at least one tracked message is due at ``now_ms``."""
        ...

    def get_scheduled_messages(self, max_messages: int, now_ms: int) -> list[Position]:
        """Up to ``max_messages`` due positions, removed from the index, sorted by position."""
        ...

    def next_delivery_time_ms(self) -> int | None:
        """When the next tracked message comes due (tick rounding included); None if none is."""
        ...

    def contains_message(self, ledger_id: int, entry_id: int) -> bool:
        """True if the position is held by the tracker (the dispatcher may skip reading it)."""
        ...

    def held_run_end(self, ledger_id: int, entry_id: int) -> int:
        """The last entry id of the ledger from ``entry_id`` on that the tracker holds
        without a gap (``entry_id - 1`` if it does not hold that one): a reader skips them
        all at once instead of asking entry by entry."""
        ...

    @property
    def tick_time_ms(self) -> int:
        """The ``delayedDeliveryTickTimeMillis`` in use."""
        ...

    @property
    def number_of_delayed_messages(self) -> int:
        """How many delayed messages are tracked (the subscription stat ``msgDelayed``)."""
        ...

    @property
    def buffer_memory_bytes(self) -> int:
        """An estimate of the memory the in-memory part of the index uses."""
        ...

    def should_pause_all_deliveries(self, now_ms: int) -> bool:
        """True when reading further would only feed the tracker (fixed-delay optimisation)."""
        ...

    def on_mark_delete(self, position: Position) -> None:
        """The subscription's mark-delete moved: positions at or before it are acknowledged."""
        ...

    def reset_tick_time(self, tick_time_ms: int) -> None:
        """Apply a new ``delayedDeliveryTickTimeMillis`` (namespace or topic policy change)."""
        ...

    def clear(self) -> None:
        """Forget every tracked message and delete what the tracker stored (subscription gone)."""
        ...

    def close(self) -> None:
        """Release memory; stored state stays for the next start (unload, restart)."""
        ...
