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

The classic mode promises less than PIP-379: a recently joined consumer is held back
by position, not by key, so one stuck message stalls it entirely (Pulsar's #21199
trade-off), and entries sent back by a nack may reach a new owner while older ones of
the key are still pending elsewhere.
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


class KeySharedClassicDispatcher(KeySharedDispatcher):
    def __init__(self, sub: Subscription, timer_driven: bool = False) -> None:
        super().__init__(sub, timer_driven)
        self.navigator = TopicLedgerNavigator(sub.topic)
        self.recently_joined: RecentlyJoinedConsumers[Consumer] = RecentlyJoinedConsumers(
            sub.cursor.mark_delete, self.navigator)

    @property
    def gating(self) -> bool:
        """Recently joined consumers are held back only in AUTO_SPLIT without out-of-order delivery."""
        return self.mode == AUTO_SPLIT and not self.allow_out_of_order

    # -- the ordering rule -----------------------------------------------------
    def _consumer_added(self, consumer: Consumer, impacted: Any) -> None:
        if self.gating:
            self._prepare()
            self.recently_joined.consumer_added(consumer, len(self.consumers), self._entries_since_first_unacked())

    def _consumer_removed(self, consumer: Consumer, impacted: Any) -> None:
        self.recently_joined.consumer_removed(consumer, len(self.consumers))

    def _may_send(self, consumer: Consumer, pos: Position, sticky_hash: int, from_replay: bool) -> bool:
        return not self.gating or self.recently_joined.can_dispatch(consumer, pos, from_replay)

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
        if self.gating and self.recently_joined.mark_delete_position_moved(self.sub.cursor.mark_delete):
            self._update_blocking(consumer)
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

