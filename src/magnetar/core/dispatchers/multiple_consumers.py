"""Shared: entries spread round-robin over consumers that have permits.

Entries put back (a consumer left, or asked for redelivery) wait in the replay queue
and go out before new reads. Consumers with the best (lowest) priority level are
served first. ``maxUnackedMessagesPerConsumer`` blocks a consumer until half its
unacked messages are acknowledged; ``maxUnackedMessagesPerSubscription`` does the
same for the whole subscription.

A dispatcher made anew (the last consumer left and another joined, the type changed)
or rewound reads again from the mark-delete position, while the subscription's
delayed-delivery tracker lives on. An entry read before may meanwhile have come due
and be waiting in the replay queue or out at a consumer, so up to the last entry that
existed at that moment a read is checked against both (``already_out``); past it,
reads are new and cost nothing extra.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from magnetar.core.dispatchers.base import Dispatcher
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer

if TYPE_CHECKING:
    from magnetar.core.subscriptions.subscription_view import SubscriptionView


class ReplayQueue:
    """Positions to deliver again, smallest first, each at most once."""

    def __init__(self) -> None:
        self._heap: list[Position] = []
        self._members: set[Position] = set()

    def add(self, pos: Position) -> None:
        if pos not in self._members:
            self._members.add(pos)
            heapq.heappush(self._heap, pos)

    def discard(self, pos: Position) -> None:
        self._members.discard(pos)

    def __contains__(self, pos: object) -> bool:
        return pos in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self._members))

    def peek(self) -> Position | None:
        while self._heap and self._heap[0] not in self._members:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def pop(self) -> Position | None:
        pos = self.peek()
        if pos is not None:
            heapq.heappop(self._heap)
            self._members.discard(pos)
        return pos

    def clear(self) -> None:
        self._heap.clear()
        self._members.clear()


class MultipleConsumersDispatcher(Dispatcher):
    def __init__(self, sub: SubscriptionView) -> None:
        super().__init__(sub)
        self.replay = ReplayQueue()
        self._next_index = 0
        #: entries up to here may have been read before (by an earlier dispatcher, or
        #: before a rewind); None once reads are past it
        self._reread_until: Position | None = self.source.last_readable()

    # -- consumers -------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        for pos in consumer.take_all_pending():
            self.replay.add(pos)
        self.dispatch(now_ms)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None:
        targets = list(consumer.pending) if positions is None else positions
        for pos in targets:
            if consumer.remove_pending(pos) is None:
                continue
            self.sub.redelivery_counts[pos] = self.sub.redelivery_counts.get(pos, 0) + 1
            self.replay.add(pos)
        consumer.redeliver.add(now_ms, len(targets))
        self._update_blocking(consumer)
        self.dispatch(now_ms)

    def on_acked(self, consumer: Consumer, now_ms: int) -> None:
        self._update_blocking(consumer)
        self.dispatch(now_ms)

    def on_limits_changed(self, now_ms: int) -> None:
        for consumer in self.consumers:
            self._update_blocking(consumer)
        super().on_limits_changed(now_ms)

    def rewind(self) -> None:
        super().rewind()
        self.replay.clear()
        self._reread_until = self.source.last_readable()

    def seek(self, last_read: Position) -> None:
        super().seek(last_read)
        self.replay.clear()
        self._reread_until = self.source.last_readable()

    def already_out(self, pos: Position) -> bool:
        """True when a read of ``pos`` re-reads an entry that waits in the replay queue or
        is out at a consumer (a delayed entry that came due since it was first read)."""
        reread_until = self._reread_until
        if reread_until is None:
            return False
        if pos > reread_until:
            self._reread_until = None
            return False
        return pos in self.replay or self._pending_somewhere(pos)

    def _pending_somewhere(self, pos: Position) -> bool:
        return any(pos in c.pending for c in self.consumers)

    # -- dispatch --------------------------------------------------------
    def dispatch(self, now_ms: int) -> None:
        while not self._subscription_blocked():
            consumer = self.next_consumer()
            if consumer is None:
                return
            pos = self.next_position_to_send(now_ms)
            if pos is None:
                return
            loaded = self.load(pos)
            if loaded is None:
                continue
            self.send(consumer, pos, loaded, now_ms)
            self._take_turn(consumer)
            self._update_blocking(consumer)

    def next_position_to_send(self, now_ms: int) -> Position | None:
        cursor = self.sub.cursor
        self.add_due_delayed(now_ms)
        while (pos := self.replay.pop()) is not None:
            if not cursor.is_acked(pos):
                return pos
        while (pos := self.next_unread()) is not None:
            if not self.already_out(pos) and not self.hold_back(pos, now_ms):
                return pos
        return None

    def add_due_delayed(self, now_ms: int) -> None:
        """Delayed entries that came due join the replay queue (they were read before)."""
        if self.sub.delayed_tracker is not None:
            from magnetar.core.delayed.delayed_delivery import take_due
            for pos in take_due(self.sub, now_ms):
                self.replay_due(pos)

    def replay_due(self, pos: Position) -> None:
        self.replay.add(pos)

    def hold_back(self, pos: Position, now_ms: int) -> bool:
        """True when the entry must not go out now (delayed delivery takes it)."""
        held = self.sub.delayed_holds(pos, now_ms, self.read_info)
        if held:
            self.held_this_round += 1
            self._pass_held_run(pos)
        return held

    def _pass_held_run(self, pos: Position) -> None:
        """Pass over the entries right after ``pos`` that the tracker holds too, in one step:
        as PIP-195 asks, the dispatcher does not read what the index holds. After a restart
        that is most of the backlog, which then costs a few bitmap checks per ledger."""
        tracker = self.sub.delayed_tracker
        if tracker is None or self.last_read != pos:
            return
        end = tracker.held_run_end(pos.ledger_id, pos.entry_id)
        if end <= pos.entry_id:
            return
        target = Position(pos.ledger_id, end)
        last = self.source.last_readable()
        self.last_read = target if last is None or target <= last else last

    def next_consumer(self) -> Consumer | None:
        """Whose turn it is: round robin among available consumers of the best priority level.

        Only a delivery moves the turn on (``_take_turn``); asking when there is nothing
        to send must not, or the consumer after the last one served would be skipped.
        """
        available = [c for c in self.consumers if c.can_take()]
        if not available:
            return None
        best = min(c.priority_level for c in available)
        count = len(self.consumers)
        for step in range(count):
            candidate = self.consumers[(self._next_index + step) % count]
            if candidate.priority_level == best and candidate.can_take():
                return candidate
        return None

    def _take_turn(self, consumer: Consumer) -> None:
        self._next_index = (self.consumers.index(consumer) + 1) % len(self.consumers)

    # -- unacked limits --------------------------------------------------
    def _update_blocking(self, consumer: Consumer) -> None:
        limit = self.sub.max_unacked_per_consumer
        if limit <= 0:
            consumer.blocked_on_unacked = False
        elif consumer.unacked_messages >= limit:
            consumer.blocked_on_unacked = True
        elif consumer.blocked_on_unacked and consumer.unacked_messages <= limit // 2:
            consumer.blocked_on_unacked = False

    def _subscription_blocked(self) -> bool:
        limit = self.sub.max_unacked_per_subscription
        if limit <= 0:
            self.blocked_on_unacked = False
            return False
        unacked = sum(c.unacked_messages for c in self.consumers)
        if unacked >= limit:
            self.blocked_on_unacked = True
        elif self.blocked_on_unacked and unacked <= limit // 2:
            self.blocked_on_unacked = False
        return self.blocked_on_unacked
