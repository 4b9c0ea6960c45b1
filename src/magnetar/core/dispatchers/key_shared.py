"""Key_Shared with draining hashes (PIP-379).

The contract: messages with the same key are delivered, and may be unacknowledged,
at only one consumer at a time. A hash moves to another consumer only after every
message of it pending at the old owner is acknowledged (or the old owner leaves,
sending its pending messages back through the replay queue in order).

How order is kept here:
- a change of assignment registers the moved hashes' pending messages in the
  draining-hashes tracker; delivering a draining hash to anyone else is blocked;
- an entry whose hash cannot go now (blocked, owner without permits, no owner)
  waits in the replay queue, and a newly read entry whose hash already waits there
  joins the queue behind it, so per-key order holds through every delay;
- replayed entries go out in position order per hash; the first that cannot go
  holds back the rest of its hash for that round.
Look-ahead limits cap how much the replay queue may grow before new reads stop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.core.consumer import Consumer, PendingEntry
from magnetar.core.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.core.errors import ConsumerAssignError, ConsumerBusy
from magnetar.core.key_shared.consistent_hashing import ConsistentHashingStickyKeyConsumerSelector
from magnetar.core.key_shared.draining_hashes_tracker import DrainingHashesTracker
from magnetar.core.key_shared.hash_range_auto_split import HashRangeAutoSplitStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_range_exclusive import HashRangeExclusiveStickyKeyConsumerSelector
from magnetar.core.key_shared.sticky_key import sticky_key, sticky_key_hash
from magnetar.core.positions import Position

if TYPE_CHECKING:
    from magnetar.core.subscription import Subscription

AUTO_SPLIT, STICKY = 0, 1
MODE_NAMES = {AUTO_SPLIT: "AUTO_SPLIT", STICKY: "STICKY"}


def key_shared_mode(meta: Any) -> tuple[int, bool]:
    """(mode, allowOutOfOrderDelivery) of a consumer; no meta means AUTO_SPLIT, in order."""
    if meta is None:
        return AUTO_SPLIT, False
    return int(meta.keySharedMode), bool(meta.allowOutOfOrderDelivery)


class KeySharedDispatcher(MultipleConsumersDispatcher):
    def __init__(self, sub: Subscription) -> None:
        super().__init__(sub)
        config = sub.topic.config
        self.mode: int | None = None
        self.allow_out_of_order = False
        self.selector: Any = None
        self.tracker: DrainingHashesTracker[Consumer] = DrainingHashesTracker(config.keySharedUnblockingIntervalMs)
        self.replay_hashes: dict[Position, int] = {}
        self.replay_hash_counts: dict[int, int] = {}
        self.look_ahead_per_consumer = config.keySharedLookAheadMsgInReplayThresholdPerConsumer
        self.look_ahead_per_subscription = config.keySharedLookAheadMsgInReplayThresholdPerSubscription

    # -- consumers -------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        mode, out_of_order = key_shared_mode(consumer.key_shared_meta)
        self._check_mode(mode, out_of_order)
        selector = self.selector or self._new_selector(mode)
        try:
            impacted = selector.add_consumer(consumer)
        except ValueError as exc:
            raise ConsumerAssignError(str(exc)) from None
        self.selector, self.mode, self.allow_out_of_order = selector, mode, out_of_order
        consumer.on_pending_removed = self._pending_removed
        super().add_consumer(consumer, now_ms)
        self._drain_impacted(impacted, consumer)

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if consumer not in self.consumers or self.selector is None:
            return
        impacted = self.selector.remove_consumer(consumer)
        self.consumers.remove(consumer)
        for pos, entry in consumer.take_all_pending().items():
            self._to_replay(pos, entry.sticky_hash)
        self.tracker.consumer_removed(consumer)
        consumer.on_pending_removed = None
        self._drain_impacted(impacted, consumer)
        if not self.consumers:
            self.selector, self.mode = None, None
        self.dispatch(now_ms)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None:
        targets = list(consumer.pending) if positions is None else positions
        for pos in targets:
            entry = consumer.remove_pending(pos)
            if entry is None:
                continue
            self.sub.redelivery_counts[pos] = self.sub.redelivery_counts.get(pos, 0) + 1
            self._to_replay(pos, entry.sticky_hash)
        consumer.redeliver.add(now_ms, len(targets))
        self._update_blocking(consumer)
        self.dispatch(now_ms)

    def rewind(self) -> None:
        super().rewind()
        self.replay_hashes.clear()
        self.replay_hash_counts.clear()

    def seek(self, last_read: Position) -> None:
        super().seek(last_read)
        self.replay_hashes.clear()
        self.replay_hash_counts.clear()

    def _check_mode(self, mode: int, out_of_order: bool) -> None:
        if self.mode is None:
            return
        if mode != self.mode:
            raise ConsumerBusy(
                f"Subscription {self.sub.name} is Key_Shared with mode {MODE_NAMES.get(self.mode)}; "
                f"the consumer asked for {MODE_NAMES.get(mode, mode)}")
        if out_of_order != self.allow_out_of_order:
            raise ConsumerBusy(
                f"Subscription {self.sub.name} is Key_Shared with allowOutOfOrderDelivery="
                f"{str(self.allow_out_of_order).lower()}; the consumer asked for {str(out_of_order).lower()}")

    def _new_selector(self, mode: int) -> Any:
        config = self.sub.topic.config
        if mode == STICKY:
            return HashRangeExclusiveStickyKeyConsumerSelector()
        if config.subscriptionKeySharedUseConsistentHashing:
            return ConsistentHashingStickyKeyConsumerSelector(
                config.subscriptionKeySharedConsistentHashingReplicaPoints)
        return HashRangeAutoSplitStickyKeyConsumerSelector()

    def _drain_impacted(self, impacted: Any, changed: Consumer) -> None:
        """Hashes that moved away from a consumer drain there until their messages are acked."""
        if not impacted or self.allow_out_of_order:
            return
        for other, removed in impacted.items():
            if other is changed or other not in self.consumers:
                continue
            hashes = [p.sticky_hash for p in other.pending.values() if p.sticky_hash in removed]
            if hashes:
                self.tracker.register_pending_hashes(other, hashes)

    def _pending_removed(self, consumer: Consumer, entry: PendingEntry, closing: bool) -> None:
        self.tracker.reduce_ref_count(consumer, entry.sticky_hash, closing)

    # -- dispatch --------------------------------------------------------
    def _to_replay(self, pos: Position, sticky_hash: int) -> None:
        if pos in self.replay_hashes:
            return
        self.replay.add(pos)
        self.replay_hashes[pos] = sticky_hash
        self.replay_hash_counts[sticky_hash] = self.replay_hash_counts.get(sticky_hash, 0) + 1

    def dispatch(self, now_ms: int) -> None:
        if self.selector is None or self._subscription_blocked():
            return
        held: set[int] = set()
        self.add_due_delayed(now_ms)
        if len(self.replay):
            self._dispatch_replay(held, now_ms)
        self._dispatch_new(held, now_ms)

    def _dispatch_replay(self, held: set[int], now_ms: int) -> None:
        cursor = self.sub.cursor
        for pos in list(self.replay):
            sticky_hash = self.replay_hashes.get(pos, 0)
            if cursor.is_acked(pos):
                self._drop_replay(pos)
                continue
            if sticky_hash in held:
                continue
            if not self._try_send(pos, sticky_hash, now_ms, from_replay=True):
                held.add(sticky_hash)

    def _dispatch_new(self, held: set[int], now_ms: int) -> None:
        while self._may_read_ahead():
            pos = self.next_unread()
            if pos is None:
                return
            if self.hold_back(pos, now_ms):
                continue
            loaded = self.load(pos)
            if loaded is None:
                continue
            sticky_hash = sticky_key_hash(sticky_key(loaded[1].metadata))
            if sticky_hash in held or self._waits_in_replay(sticky_hash):
                self._to_replay(pos, sticky_hash)
                held.add(sticky_hash)
                continue
            if not self._try_send(pos, sticky_hash, now_ms, from_replay=False, loaded=loaded):
                self._to_replay(pos, sticky_hash)
                held.add(sticky_hash)

    def _try_send(self, pos: Position, sticky_hash: int, now_ms: int, from_replay: bool,
                  loaded: Any = None) -> bool:
        consumer = self.selector.select(sticky_hash)
        if consumer is None or consumer.permits <= 0 or consumer.blocked_on_unacked:
            return False
        if not self.allow_out_of_order and self.tracker.should_block_sticky_key_hash(consumer, sticky_hash):
            return False
        loaded = loaded or self.load(pos)
        if loaded is None:
            if from_replay:
                self._drop_replay(pos)
            return True
        if not self.allow_out_of_order and not self.tracker.handle_adding_pending_ack(consumer, sticky_hash):
            return False
        if from_replay:
            self._drop_replay(pos)
        self.send(consumer, pos, loaded, now_ms, sticky_hash)
        self._update_blocking(consumer)
        return True

    def replay_due(self, pos: Position) -> None:
        loaded = self.load(pos)
        if loaded is not None:
            self._to_replay(pos, sticky_key_hash(sticky_key(loaded[1].metadata)))

    def _drop_replay(self, pos: Position) -> None:
        self.replay.discard(pos)
        sticky_hash = self.replay_hashes.pop(pos, None)
        if sticky_hash is not None:
            left = self.replay_hash_counts[sticky_hash] - 1
            if left:
                self.replay_hash_counts[sticky_hash] = left
            else:
                del self.replay_hash_counts[sticky_hash]

    def _waits_in_replay(self, sticky_hash: int) -> bool:
        return sticky_hash in self.replay_hash_counts

    def _may_read_ahead(self) -> bool:
        if not any(c.permits > 0 and not c.blocked_on_unacked for c in self.consumers):
            return False
        if len(self.replay) >= self.look_ahead_per_subscription:
            return False
        return len(self.replay) < self.look_ahead_per_consumer * max(1, len(self.consumers))

    # -- stats -------------------------------------------------------------
    def consumer_stats(self, consumer: Consumer) -> dict[str, Any]:
        stats: dict[str, Any] = self.tracker.consumer_stats(consumer).to_json()
        ranges = self.selector.consumer_key_hash_ranges().get(consumer, []) if self.selector else []
        stats["keyHashRangeArrays"] = [r.as_list() for r in ranges]
        stats["keyHashRanges"] = [str(r) for r in ranges]
        return stats

    def subscription_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.tracker.subscription_stats().to_json(with_hashes=False)
        stats["allowOutOfOrderDelivery"] = self.allow_out_of_order
        stats["keySharedMode"] = MODE_NAMES.get(self.mode if self.mode is not None else AUTO_SPLIT)
        return stats
