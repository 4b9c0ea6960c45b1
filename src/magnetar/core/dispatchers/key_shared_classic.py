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

Two holes of PIP-282 are closed here, both found by the simulator. Entries sent
*beyond* the last sent position (out of order, while an earlier entry waited) were not
covered, so once the mark-delete position passed the joining position a newcomer could
receive a key whose later entry was still pending at its old owner. And when a consumer
leaves, its keys go to others while a third consumer may still hold entries of them
(the leaver was itself a newcomer waiting for them). In both cases the consumer given
the keys is held back, beyond the last sent position, until those entries pending
elsewhere are acknowledged or sent back (then they wait in line like any other).

The classic mode still promises less than PIP-379: a recently joined consumer is held
back by position, not by key, so one stuck message stalls it entirely (Pulsar's #21199
trade-off), and entries sent back (a nack, or their consumer leaving) may reach a new
owner while older ones of the key are still pending elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.core.dispatchers.key_shared import AUTO_SPLIT, KeySharedDispatcher
from magnetar.core.key_shared.recently_joined_consumers import RecentlyJoinedConsumers
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer

if TYPE_CHECKING:
    from magnetar.core.subscriptions.subscription_view import SubscriptionView, TopicView


class TopicLedgerNavigator:
    """Positions before and after an entry, across ledger boundaries, from the topic's ledger."""

    def __init__(self, topic: TopicView) -> None:
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
    """Entries pending at other consumers, of keys a consumer has just been given: until
    each is acknowledged, the consumer gets nothing beyond ``joined_at``."""

    __slots__ = ("joined_at", "positions")

    def __init__(self, joined_at: Position, positions: set[Position]) -> None:
        self.joined_at = joined_at
        self.positions = positions

    def all_done(self, holder_of: dict[Position, Consumer], consumer: Consumer) -> bool:
        """Whether none is pending at another consumer any more (acknowledged, or sent back
        and waiting in line); settled ones are dropped."""
        self.positions = {p for p in self.positions if holder_of.get(p, consumer) is not consumer}
        return not self.positions


class KeySharedClassicDispatcher(KeySharedDispatcher):
    def __init__(self, sub: SubscriptionView, timer_driven: bool = False) -> None:
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
        if joined_at is not None and len(self.consumers) > 1:
            self._hold_for_keys_pending_elsewhere([consumer], joined_at)

    def _consumer_removed(self, consumer: Consumer, impacted: Any) -> None:
        self.recently_joined.consumer_removed(consumer, len(self.consumers))
        self.sent_before_joining.pop(consumer, None)
        if len(self.consumers) <= 1:
            self.sent_before_joining.clear()
        elif self.gating:
            # the leaver's keys went to others, and some may still be pending at a third
            # consumer (the leaver was itself waiting for them): the heirs wait too
            self._prepare()
            last_sent = self.recently_joined.last_sent_position
            if last_sent is not None:
                self._hold_for_keys_pending_elsewhere(self.consumers, last_sent)

    def _hold_for_keys_pending_elsewhere(self, heirs: list[Consumer], joined_at: Position) -> None:
        """Hold each heir back (beyond ``joined_at``) until the entries of its keys pending at
        other consumers are acknowledged: PIP-282 alone misses those sent beyond the last
        sent position, and keys handed over when a consumer leaves."""
        if self.selector is None:
            return
        select = self.selector.select
        found: dict[Consumer, set[Position]] = {}
        for other in self.consumers:
            for pos, entry in other.pending.items():
                owner = select(entry.sticky_hash)
                if owner is not other and owner in heirs:
                    found.setdefault(owner, set()).add(pos)
        for heir, positions in found.items():
            held = self.sent_before_joining.get(heir)
            if held is None:
                self.sent_before_joining[heir] = SentBeforeJoining(joined_at, positions)
            else:
                held.joined_at = min(held.joined_at, joined_at)
                held.positions |= positions

    def _may_send(self, consumer: Consumer, pos: Position, sticky_hash: int, from_replay: bool) -> bool:
        if not self.gating:
            return True
        waiting = self.sent_before_joining.get(consumer)
        if waiting is not None and pos > waiting.joined_at:
            if not waiting.all_done(self._holders(waiting.positions), consumer):
                return False
            del self.sent_before_joining[consumer]
        return self.recently_joined.can_dispatch(consumer, pos, from_replay)

    def _holders(self, positions: set[Position]) -> dict[Position, Consumer]:
        """Which consumer each of ``positions`` is pending at; those pending nowhere, or
        consumed already (message TTL moves the mark-delete past pending entries), are left out."""
        acked = self.sub.cursor.is_acked
        return {p: c for c in self.consumers for p in positions if p in c.pending and not acked(p)}

    def _released(self) -> bool:
        """Whether an acknowledgement let a recently joined consumer go."""
        released = self.recently_joined.mark_delete_position_moved(self.sub.cursor.mark_delete)
        for consumer, waiting in list(self.sent_before_joining.items()):
            if waiting.all_done(self._holders(waiting.positions), consumer):
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

