"""The in-memory delayed-delivery tracker: Pulsar's ``InMemoryDelayedDeliveryTracker``.

As in Pulsar 4.x, delivery times are grouped into time slots of ``2^k`` ms, the largest
power of two not above the tick (512 ms for the default 1 s tick), since deliveries are
only as precise as the tick anyway. Each slot holds a bitmap of entry ids per ledger, so a
dense stream of delayed messages costs a few bytes per message instead of a heap node each:

    heap of slot times  ->  slot time  ->  ledger id  ->  BitMap(entry ids)

Not strict, a slot time is rounded down and the slot is due once its start is within
``tick - slot + 1`` ms of now, so nothing leaves more than one tick early. Strict, it is
rounded up and due when it has passed, so nothing leaves early and at most one slot late
(Pulsar #25996). Within a slot messages come out in position order.

Beyond Pulsar, a position index (``DelayedMessageIndex``) answers ``contains_message``,
ignores a second add of a tracked position, forgets a tracked message when it is re-added
as already due (it is then delivered directly, Pulsar's bucket-tracker rule), and drops
positions the mark-delete has passed.
"""

from __future__ import annotations

import heapq
import sys
from itertools import islice

from pyroaring import BitMap

from magnetar.core.delayed.delayed_message_index import DelayedMessageIndex, bitmap_memory_bytes
from magnetar.core.delayed.tracker import DEFAULT_TICK_TIME_MS, IndexedTracker, check_position
from magnetar.core.positions import Position

#: Pulsar's ``delayedDeliveryFixedDelayDetectionLookahead`` default.
DEFAULT_FIXED_DELAY_DETECTION_LOOKAHEAD = 50_000


def timestamp_precision_bits(tick_time_ms: int) -> int:
    """Bits of the delivery time to drop: the largest ``k`` with ``2^k <= tick`` (0 for tick <= 1)."""
    return max(tick_time_ms.bit_length() - 1, 0)


class InMemoryDelayedDeliveryTracker(IndexedTracker):
    """Delayed-message index held entirely in memory, bucketed by time slot."""

    def __init__(
        self,
        *,
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        is_delayed_delivery_deliver_at_time_strict: bool = False,
        fixed_delay_detection_lookahead: int = DEFAULT_FIXED_DELAY_DETECTION_LOOKAHEAD,
    ) -> None:
        if tick_time_ms < 0:
            raise ValueError(f"delayedDeliveryTickTimeMillis must be >= 0, got {tick_time_ms}")
        self._tick_time_ms = tick_time_ms
        self._strict = is_delayed_delivery_deliver_at_time_strict
        self._fixed_delay_detection_lookahead = fixed_delay_detection_lookahead
        # The slot width is fixed at creation, as in Pulsar: changing it later would put one
        # position in two slots.
        self._precision_bits = timestamp_precision_bits(tick_time_ms)
        self._precision_ms = 1 << self._precision_bits
        self._slot_times: list[int] = []
        self._slots: dict[int, dict[int, BitMap]] = {}
        self._index = DelayedMessageIndex()
        self._highest_delivery_time_tracked_ms = 0
        self._messages_have_fixed_delay = True

    # -- time rules -------------------------------------------------------------------

    def _slot_cutoff(self, now_ms: int) -> int:
        if self._strict:
            return now_ms
        return now_ms + self._tick_time_ms - self._precision_ms + 1

    def _slot_time(self, deliver_at_ms: int) -> int:
        mask = -1 << self._precision_bits
        if self._strict:
            return (deliver_at_ms + self._precision_ms - 1) & mask
        return deliver_at_ms & mask

    # -- the tracker interface ----------------------------------------------------------

    def add_message(self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int) -> bool:
        check_position(ledger_id, entry_id)
        if deliver_at_ms < 0 or deliver_at_ms <= self._cutoff(now_ms):
            self._messages_have_fixed_delay = False
            self._index.untrack(ledger_id, entry_id)
            return False
        if not self._index.track(ledger_id, entry_id):
            return True
        slot_time = self._slot_time(deliver_at_ms)
        slot = self._slots.get(slot_time)
        if slot is None:
            slot = self._slots[slot_time] = {}
            heapq.heappush(self._slot_times, slot_time)
        bitmap = slot.get(ledger_id)
        if bitmap is None:
            bitmap = slot[ledger_id] = BitMap()
        bitmap.add(entry_id)
        self._check_and_update_highest(deliver_at_ms)
        return True

    def _check_and_update_highest(self, deliver_at_ms: int) -> None:
        # Fixed delays arrive in (nearly) increasing delivery order; allow one tick of jitter.
        if deliver_at_ms < self._highest_delivery_time_tracked_ms - self._tick_time_ms:
            self._messages_have_fixed_delay = False
        self._highest_delivery_time_tracked_ms = max(self._highest_delivery_time_tracked_ms, deliver_at_ms)

    def has_message_available(self, now_ms: int) -> bool:
        return bool(self._slot_times) and self._slot_times[0] <= self._slot_cutoff(now_ms)

    def get_scheduled_messages(self, max_messages: int, now_ms: int) -> list[Position]:
        positions: list[Position] = []
        cutoff = self._slot_cutoff(now_ms)
        while len(positions) < max_messages and self._slot_times and self._slot_times[0] <= cutoff:
            slot_time = self._slot_times[0]
            slot = self._slots[slot_time]
            self._drain_slot(slot, max_messages - len(positions), positions)
            if not slot:
                heapq.heappop(self._slot_times)
                del self._slots[slot_time]
        if not self._slot_times:
            self._highest_delivery_time_tracked_ms = 0
            self._messages_have_fixed_delay = True
        positions.sort()
        return positions

    def _drain_slot(self, slot: dict[int, BitMap], limit: int, out: list[Position]) -> None:
        """Move up to ``limit`` still-tracked positions of one slot into ``out``, in order."""
        for ledger_id in sorted(slot):
            if limit <= 0:
                return
            bitmap = slot[ledger_id]
            if len(bitmap) <= limit:
                taken = bitmap
                del slot[ledger_id]
            else:
                # Stale entries (re-added as due, or trimmed) do not count against the limit,
                # so a slot full of them is still drained in bounded passes.
                taken = BitMap(islice(bitmap, limit))
                bitmap.remove_range(taken.min(), taken.max() + 1)
            delivered = self._index.untrack_many(ledger_id, taken)
            out.extend(Position(ledger_id, entry_id) for entry_id in delivered)
            limit -= len(delivered)

    def next_delivery_time_ms(self) -> int | None:
        return self._slot_times[0] if self._slot_times else None

    @property
    def buffer_memory_bytes(self) -> int:
        slot_bytes = sum(
            sys.getsizeof(slot) + sum(bitmap_memory_bytes(bitmap) for bitmap in slot.values())
            for slot in self._slots.values()
        )
        return slot_bytes + sys.getsizeof(self._slot_times) + self._index.memory_bytes()

    def should_pause_all_deliveries(self, now_ms: int) -> bool:
        lookahead = self._fixed_delay_detection_lookahead
        return (
            lookahead > 0
            and self._messages_have_fixed_delay
            and self.number_of_delayed_messages >= lookahead
            and not self.has_message_available(now_ms)
        )

    def on_mark_delete(self, position: Position) -> None:
        # Slots keep the stale bits until they drain; the index makes them invisible now.
        self._index.trim_up_to(position)

    def clear(self) -> None:
        self._slot_times = []
        self._slots = {}
        self._index.clear()
        self._highest_delivery_time_tracked_ms = 0
        self._messages_have_fixed_delay = True

    def close(self) -> None:
        self.clear()
