"""Key_Shared, classic mode: "recently joined consumers" with PIP-282's last sent position.

Selected by ``subscriptionKeySharedUseClassicPersistentImplementation=true``, for users
who want Pulsar 3.x's behaviour back (PIP-379 keeps this switch). Instead of draining
hashes, a consumer that joins while messages are outstanding is held to the entries
at or before the *last sent position* of that moment (every entry up to it has been
handed to some consumer), and for replayed entries to the earliest such position of
all recently joined consumers, until the mark-delete position passes it. Seed 003
explains why the last sent position, not the read position: entries read but not yet
sent, or parked in the replay queue, must not reach the newcomer first.

Everything else (selectors, the replay queue with per-hash lines that keeps newer
entries of a waiting hash behind it, look-ahead limits, unacked limits) is shared with
the PIP-379 dispatcher. STICKY and ``allowOutOfOrderDelivery`` need no gating here,
as in Pulsar.

One hole of PIP-282 is closed here: entries sent *beyond* the last sent position
(out of order, while an earlier entry waited) were not covered, so once the mark-delete
position passed the joining position a newcomer could receive a key whose entry beyond
it was still pending at its old owner (found by the simulator). Such entries, pending
at other consumers when it joins and of keys it now owns, hold it back too until they
are acknowledged; if one comes back (its consumer left) the newcomer may take it.

The classic mode still promises less than PIP-379: a recently joined consumer is held
back by position, not by key, so one stuck message stalls it entirely (Pulsar's #21199
trade-off), and entries sent back (a nack, or their consumer leaving) may reach a new
owner while older ones of the key are still pending elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.core.consumer import Consumer
from magnetar.core.dispatchers.key_shared import AUTO_SPLIT, KeySharedDispatcher
from magnetar.core.key_shared.recently_joined_consumers import RecentlyJoinedConsumers
from magnetar.core.positions import Position

if TYPE_CHECKING:
    from magnetar.core.subscription import Subscription
    from magnetar.core.topic import Topic


class TopicLedgerNavigator:
    """Positions before and after an entry, across ledger boundaries, from the topic's ledger."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic

    def next_position(self, position: Position) -> Position:
        return self.topic.next_position(position)

    def previous_position(self, position: Position) -> Position:
        if position.entry_id > 0:
            return Position(position.ledger_id, position.entry_id - 1)
        previous = Position(position.ledger_id, -1)
        for info in self.topic.ledger.ledgers():
            if info.ledger_id >= position.ledger_id:
                break
            if info.entries:
                previous = Position(info.ledger_id, info.entries - 1)
        return previous


class SentBeforeJoining:
    """Entries of a recently joined consumer's keys that were sent beyond its joining
    position, before it joined, and were pending at other consumers then."""

    __slots__ = ("joined_at", "positions")

    def __init__(self, joined_at: Position, positions: set[Position]) -> None:
        self.joined_at = joined_at
        self.positions = positions

    def covers(self, pos: Position) -> bool:
        return pos in self.positions

    def all_done(self, sub: Subscription, consumer: Consumer) -> bool:
        """Whether each is acknowledged or pending at ``consumer`` itself; settled ones are dropped."""
        cursor = sub.cursor
        if cursor.mark_delete < self.joined_at:
            return False
        self.positions = {p for p in self.positions if not cursor.is_acked(p) and p not in consumer.pending}
        return not self.positions


class KeySharedClassicDispatcher(KeySharedDispatcher):
    def __init__(self, sub: Subscription, timer_driven: bool = False) -> None:
        super().__init__(sub, timer_driven)
        self.navigator = TopicLedgerNavigator(sub.topic)
        self.recently_joined: RecentlyJoinedConsumers[Consumer] = RecentlyJoinedConsumers(
            sub.cursor.mark_delete, self.navigator)
        #: recently joined consumers still waiting for entries sent beyond their joining position
        self.sent_before_joining: dict[Consumer, SentBeforeJoining] = {}

    @property
    def gating(self) -> bool:
        """Recently joined consumers are held back only in AUTO_SPLIT without out-of-order delivery."""
        return self.mode == AUTO_SPLIT and not self.allow_out_of_order

    # -- the ordering rule -----------------------------------------------------
    def _consumer_added(self, consumer: Consumer, impacted: Any) -> None:
        if not self.gating:
            return
        self._prepare()
        rjc = self.recently_joined
        joined_at = rjc.consumer_added(consumer, len(self.consumers), self._entries_since_first_unacked())
        if joined_at is None or consumer not in rjc:
            return
        select = self.selector.select
        beyond = {pos for other in self.consumers if other is not consumer
                  for pos, entry in other.pending.items()
                  if pos > joined_at and select(entry.sticky_hash) is consumer}
        if beyond:
            self.sent_before_joining[consumer] = SentBeforeJoining(joined_at, beyond)

    def _consumer_removed(self, consumer: Consumer, impacted: Any) -> None:
        self.recently_joined.consumer_removed(consumer, len(self.consumers))
        self.sent_before_joining.pop(consumer, None)
        if len(self.consumers) <= 1:
            self.sent_before_joining.clear()

    def _may_send(self, consumer: Consumer, pos: Position, sticky_hash: int, from_replay: bool) -> bool:
        if not self.gating:
            return True
        waiting = self.sent_before_joining.get(consumer)
        if waiting is not None and pos > waiting.joined_at:
            if not waiting.all_done(self.sub, consumer):
                # such an entry, sent back since, may come: waiting for it would never end
                return waiting.covers(pos)
            del self.sent_before_joining[consumer]
        return self.recently_joined.can_dispatch(consumer, pos, from_replay)

    def _released(self) -> bool:
        """Whether an acknowledgement let a recently joined consumer go."""
        released = self.recently_joined.mark_delete_position_moved(self.sub.cursor.mark_delete)
        for consumer, waiting in list(self.sent_before_joining.items()):
            if waiting.all_done(self.sub, consumer):
                del self.sent_before_joining[consumer]
                released = True
        return released

    def _sent(self, consumer: Consumer, pos: Position) -> None:
        if self.gating:
            self.recently_joined.entries_sent((pos,))

    def _entries_since_first_unacked(self) -> int:
        """Pulsar's ``getNumberOfEntriesSinceFirstNotAckedMessage``: entries read past the
        mark-delete position, plus the read position itself."""
        mark_delete = self.sub.cursor.mark_delete
        if self.last_read <= mark_delete:
            return 1
        return self.sub.topic.entries_between(self.source.next_position(mark_delete), self.last_read) + 1

    def _prepare(self) -> None:
        rjc = self.recently_joined
        rjc.mark_delete_position_moved(self.sub.cursor.mark_delete)
        if rjc.last_sent_position is None:
            previous = self.navigator.previous_position
            acked = [(previous(first), last) for first, last in self.sub.cursor.deleted_ranges()]
            rjc.prepare_dispatch(acked)
        else:
            rjc.prepare_dispatch()

    # -- events ----------------------------------------------------------------
    def dispatch(self, now_ms: int) -> None:
        if self.gating:
            self._prepare()
        super().dispatch(now_ms)

    def on_acked(self, consumer: Consumer, now_ms: int) -> None:
        if self.gating and self._released():
            self._update_blocking(consumer)
            self.begin_round()
            self.dispatch(now_ms)
            return
        super().on_acked(consumer, now_ms)

    # -- stats -------------------------------------------------------------------
    def consumer_stats(self, consumer: Consumer) -> dict[str, Any]:
        stats = super().consumer_stats(consumer)
        joined_at = self.recently_joined.last_sent_position_when_joining(consumer)
        stats["lastSentPositionWhenJoining"] = str(joined_at) if joined_at is not None else None
        return stats

    def subscription_stats(self) -> dict[str, Any]:
        stats = super().subscription_stats()
        rjc = self.recently_joined
        stats["consumersAfterMarkDeletePosition"] = rjc.consumers_after_mark_delete_position(
            lambda c: c.address or None)
        last_sent = rjc.last_sent_position
        stats["lastSentPosition"] = str(last_sent) if last_sent is not None else None
        stats["individuallySentPositions"] = rjc.individually_sent_positions_stat()
        return stats

