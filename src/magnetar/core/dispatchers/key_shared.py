"""Key_Shared with draining hashes (PIP-379; Pulsar 4.x ``PersistentStickyKeyDispatcherMultipleConsumers``).

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

Acknowledgements re-run dispatch only when they can let something out: a consumer or
the subscription leaves its unacked-messages block, the replay queue is full (an
acknowledged entry there frees room), or a draining hash that blocked a delivery
clears. Clears are retried together: at once, or, when ``timer_driven`` (the shell
calls ``on_timer`` when ``next_deadline_ms()`` comes), once per
``keySharedUnblockingIntervalMs``, as Pulsar batches them. A shell that keeps no
clock of its own sets ``wake_up``: it is called with the deadline whenever an
acknowledgement arms one.

Subclasses change the ordering rule through four hooks: ``_consumer_added``,
``_consumer_removed``, ``_may_send`` and ``_sent`` (see ``key_shared_classic``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.core.dispatchers.base import DispatcherFactory
from magnetar.core.dispatchers.key_shared_replay import KeyedReplayQueue
from magnetar.core.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.core.errors import ConsumerAssignError, ConsumerBusy
from magnetar.core.key_shared.consistent_hashing import ConsistentHashingStickyKeyConsumerSelector
from magnetar.core.key_shared.draining_hashes_tracker import DrainingHashesTracker
from magnetar.core.key_shared.hash_range_auto_split import HashRangeAutoSplitStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_range_exclusive import HashRangeExclusiveStickyKeyConsumerSelector
from magnetar.core.key_shared.sticky_key import sticky_key, sticky_key_hash
from magnetar.core.key_shared.sticky_key_consumer_selector import StickyKeyConsumerSelector
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer, PendingEntry

if TYPE_CHECKING:
    from magnetar.core.dispatchers.base import Dispatcher
    from magnetar.core.subscriptions.subscription_view import SubscriptionView

AUTO_SPLIT, STICKY = 0, 1
MODE_NAMES = {AUTO_SPLIT: "AUTO_SPLIT", STICKY: "STICKY"}
Loaded = Any


def key_shared_mode(meta: Any) -> tuple[int, bool]:
    """(mode, allowOutOfOrderDelivery) of a consumer; no meta means AUTO_SPLIT, in order."""
    if meta is None:
        return AUTO_SPLIT, False
    return int(meta.keySharedMode), bool(meta.allowOutOfOrderDelivery)


class KeySharedDispatcher(MultipleConsumersDispatcher):
    def __init__(self, sub: SubscriptionView, timer_driven: bool = False) -> None:
        super().__init__(sub)
        config = sub.topic.config
        self.mode: int | None = None
        self.allow_out_of_order = False
        self.selector: StickyKeyConsumerSelector[Consumer] | None = None
        self.tracker: DrainingHashesTracker[Consumer] = DrainingHashesTracker(
            config.keySharedUnblockingIntervalMs, unblocking_handler=self._hash_unblocked)
        self.replay: KeyedReplayQueue[Consumer] = KeyedReplayQueue(self._owner_of)  # type: ignore[assignment]
        self.look_ahead_per_consumer = config.keySharedLookAheadMsgInReplayThresholdPerConsumer
        self.look_ahead_per_subscription = config.keySharedLookAheadMsgInReplayThresholdPerSubscription
        #: per consumer, the mark-delete position its pending entries were last checked against
        self._checked_mark_delete: dict[Consumer, Position] = {}
        #: whether the shell calls ``on_timer`` at ``next_deadline_ms()``; if not, clears are retried at once
        self.timer_driven = timer_driven
        #: the shell's alarm, called with a deadline at which ``on_timer`` is due
        self.wake_up: Callable[[int], None] | None = None
        self._now_ms = 0

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
        self.replay.owners_changed()
        consumer.on_pending_removed = self._pending_removed
        super().add_consumer(consumer, now_ms)
        self._consumer_added(consumer, impacted)

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if consumer not in self.consumers or self.selector is None:
            return
        self._now_ms = max(self._now_ms, now_ms)
        impacted = self.selector.remove_consumer(consumer)
        self.replay.owners_changed()
        self.consumers.remove(consumer)
        for pos, entry in consumer.take_all_pending().items():
            self.replay.add(pos, entry.sticky_hash)
        self.tracker.consumer_removed(consumer)
        self._checked_mark_delete.pop(consumer, None)
        consumer.on_pending_removed = None
        self._consumer_removed(consumer, impacted)
        if not self.consumers:
            self.selector, self.mode = None, None
        self.begin_round()
        self.dispatch(now_ms)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None:
        targets = list(consumer.pending) if positions is None else positions
        for pos in targets:
            entry = consumer.remove_pending(pos)
            if entry is None:
                continue
            self.sub.redelivery_counts[pos] = self.sub.redelivery_counts.get(pos, 0) + 1
            self.replay.add(pos, entry.sticky_hash)
        consumer.redeliver.add(now_ms, len(targets))
        self._update_blocking(consumer)
        self.begin_round()
        self.dispatch(now_ms)

    def on_acked(self, consumer: Consumer, now_ms: int) -> None:
        self._now_ms = now_ms
        before = consumer.blocked_on_unacked, self.blocked_on_unacked
        self._update_blocking(consumer)
        self._subscription_blocked()
        freed = before != (consumer.blocked_on_unacked, self.blocked_on_unacked)
        if freed or self._read_ahead_limited() or self._unblocked_now(now_ms):
            self.begin_round()
            self.dispatch(now_ms)

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

    # -- the ordering rule (hooks) -------------------------------------------
    def _consumer_added(self, consumer: Consumer, impacted: Any) -> None:
        """Hashes that moved away from a consumer drain there until their messages are acked."""
        if not impacted or self.allow_out_of_order:
            return
        for other, removed in impacted.items():
            if other is consumer or other not in self.consumers:
                continue
            hashes = [p.sticky_hash for p in other.pending.values() if p.sticky_hash in removed]
            if hashes:
                self.tracker.register_pending_hashes(other, hashes)

    def _consumer_removed(self, consumer: Consumer, impacted: Any) -> None:
        """A leave only hands the leaver's hashes to others: nothing pending elsewhere moves."""
        self._consumer_added(consumer, impacted)

    def _may_send(self, consumer: Consumer, pos: Position, sticky_hash: int, from_replay: bool) -> bool:
        if self.allow_out_of_order:
            return True
        if self.tracker.should_block_sticky_key_hash(consumer, sticky_hash):
            if not self._drop_expired_pending(sticky_hash):
                return False
            if self.tracker.should_block_sticky_key_hash(consumer, sticky_hash):
                return False
        # PIP-379 step 7: the pending-acks add hook has the last word
        return self.tracker.handle_adding_pending_ack(consumer, sticky_hash)

    def _drop_expired_pending(self, sticky_hash: int) -> bool:
        """The mark-delete position can pass entries still pending at a consumer (message
        TTL, skip, an admin reset forward): they are consumed, so they must stop holding
        their hashes. Checked lazily, once per mark-delete position, for the consumer a
        blocked hash drains at (Pulsar trims pending acks when the mark-delete moves).
        True if something was dropped."""
        holder = self.tracker.draining_consumer(sticky_hash)
        mark_delete = self.sub.cursor.mark_delete
        if holder is None or self._checked_mark_delete.get(holder) == mark_delete:
            return holder is None
        self._checked_mark_delete[holder] = mark_delete
        consumed = [p for p in holder.pending if p <= mark_delete]
        for p in consumed:
            holder.remove_pending(p)
        if consumed:
            self._update_blocking(holder)
        return bool(consumed)

    def _sent(self, consumer: Consumer, pos: Position) -> None:
        """Told of every entry handed to a consumer."""

    def _pending_removed(self, consumer: Consumer, entry: PendingEntry, closing: bool) -> None:
        self.tracker.reduce_ref_count(consumer, entry.sticky_hash, closing)

    # -- unblocking ---------------------------------------------------------
    def _defers_unblocking(self) -> bool:
        return self.timer_driven and self.tracker.unblocking_interval_ms > 0

    def _unblocked_now(self, now_ms: int) -> bool:
        """Whether a cleared hash should be retried right now (else the timer will)."""
        deadline = self.tracker.next_unblock_deadline_ms(now_ms)
        if deadline is None:
            return False
        return not self._defers_unblocking()

    def _forget_unblocked(self, now_ms: int) -> None:
        """A dispatch round retries every blocked hash: any pending retry is served."""
        deadline = self.tracker.next_unblock_deadline_ms(now_ms)
        if deadline is not None:
            self.tracker.poll_unblocked(max(now_ms, deadline))

    def _hash_unblocked(self, sticky_key_hash: int) -> None:
        """A hash cleared, by whatever path (ack, redelivery, a consumer leaving, a cursor
        moved by an admin): ask for the retry at once, or nothing would ever ring for it."""
        self._arm_wake_up(self._now_ms)

    def _arm_wake_up(self, now_ms: int) -> None:
        if self.wake_up is None or not self._defers_unblocking():
            return
        deadline = self.tracker.next_unblock_deadline_ms(now_ms)
        if deadline is not None:
            self.wake_up(deadline)

    def next_deadline_ms(self) -> int | None:
        """When the shell should call ``on_timer`` (only when ``timer_driven``), or None."""
        if not self.timer_driven:
            return None
        return self.tracker.next_unblock_deadline_ms(self._now_ms)

    def on_timer(self, now_ms: int) -> None:
        """Retry blocked deliveries if the unblocking deadline came. A timer rings once:
        when a later deadline replaced the one it was armed for (a dispatch round served
        the earlier retry, then another hash cleared), ask again for that one."""
        self._now_ms = now_ms
        if self.tracker.poll_unblocked(now_ms):
            self.begin_round()
            self.dispatch(now_ms)
        self._arm_wake_up(now_ms)

    # -- dispatch --------------------------------------------------------
    def dispatch(self, now_ms: int) -> None:
        self._now_ms = now_ms
        if self.selector is None or self._subscription_blocked():
            return
        self._forget_unblocked(now_ms)
        self.add_due_delayed(now_ms)
        if len(self.replay):
            self._dispatch_replay(now_ms)
        self._dispatch_new(now_ms)

    def _dispatch_replay(self, now_ms: int) -> None:
        """Each consumer that can take entries gets its waiting hashes' entries in position
        order; the first of a hash that cannot go holds back the rest of its line."""
        cursor = self.sub.cursor
        replay = self.replay
        for consumer in list(self.consumers):
            if not consumer.can_take():
                continue
            heads = [(pos, h) for h in replay.hashes_of(consumer) if (pos := replay.head(h)) is not None]
            heapq.heapify(heads)
            while heads and consumer.can_take():
                pos, sticky_hash = heads[0]
                if cursor.is_acked(pos):
                    replay.discard(pos)
                elif not self._try_send(pos, sticky_hash, now_ms, from_replay=True):
                    heapq.heappop(heads)
                    continue
                following = replay.head(sticky_hash)
                if following is None:
                    heapq.heappop(heads)
                else:
                    heapq.heapreplace(heads, (following, sticky_hash))

    def _owner_of(self, sticky_hash: int) -> Consumer | None:
        return self.selector.select(sticky_hash) if self.selector is not None else None

    def _dispatch_new(self, now_ms: int) -> None:
        while self._may_read_ahead():
            pos = self.next_unread()
            if pos is None:
                return
            if self.already_out(pos) or self.hold_back(pos, now_ms):
                continue
            loaded = self.load(pos)
            if loaded is None:
                continue
            sticky_hash = sticky_key_hash(sticky_key(loaded[1].metadata))
            if self.replay.contains_hash(sticky_hash) or \
                    not self._try_send(pos, sticky_hash, now_ms, from_replay=False, loaded=loaded):
                self.replay.add(pos, sticky_hash)

    def _try_send(self, pos: Position, sticky_hash: int, now_ms: int, from_replay: bool,
                  loaded: Loaded = None) -> bool:
        """Send the entry to its hash's consumer if allowed; True if it left the queue."""
        if self.selector is None:
            return False
        consumer = self.selector.select(sticky_hash)
        if consumer is None or not consumer.can_take():
            return False
        if not self._may_send(consumer, pos, sticky_hash, from_replay):
            return False
        loaded = loaded or self.load(pos)
        if from_replay:
            self.replay.discard(pos)
        if loaded is None:
            return True
        self.send(consumer, pos, loaded, now_ms, sticky_hash)
        self._update_blocking(consumer)
        self._sent(consumer, pos)
        return True

    def replay_due(self, pos: Position) -> None:
        """A delayed entry came due: it waits in line with its hash like any other."""
        loaded = self.load(pos)
        if loaded is not None:
            self.replay.add(pos, sticky_key_hash(sticky_key(loaded[1].metadata)))

    def _may_read_ahead(self) -> bool:
        for c in self.consumers:
            if c.can_take():
                break
        else:
            return False
        return not self._read_ahead_limited() and not self._subscription_blocked()

    def _read_ahead_limited(self) -> bool:
        """The replay queue holds as much as the look-ahead limits allow."""
        waiting = len(self.replay)
        if waiting >= self.look_ahead_per_subscription:
            return True
        return waiting >= self.look_ahead_per_consumer * max(1, len(self.consumers))

    # -- stats -------------------------------------------------------------
    def consumer_stats(self, consumer: Consumer) -> dict[str, Any]:
        stats: dict[str, Any] = self.tracker.consumer_stats(consumer).to_json()
        ranges = self.selector.consumer_key_hash_ranges().get(consumer, []) if self.selector else []
        stats["keyHashRangeArrays"] = [r.as_list() for r in ranges]
        stats["keyHashRanges"] = [str(r) for r in ranges]
        return stats

    def hash_status(self, sticky_hash: int) -> dict[str, Any]:
        """Who a hash goes to, where it drains and what waits for it: why a key is stuck."""
        owner = self.selector.select(sticky_hash) if self.selector is not None else None
        draining = self.tracker.get_entry(sticky_hash)
        return {
            "stickyKeyHash": sticky_hash,
            "consumerName": owner.consumer_name if owner is not None else None,
            "consumerId": owner.consumer_id if owner is not None else None,
            "drainingConsumerName": draining.consumer.consumer_name if draining is not None else None,
            "drainingConsumerId": draining.consumer.consumer_id if draining is not None else None,
            "drainingUnackedMessages": draining.ref_count if draining is not None else 0,
            "blockedAttempts": draining.blocked_count if draining is not None else 0,
            "messagesWaitingForReplay": self.replay.count_of(sticky_hash),
        }

    def is_draining_at(self, consumer: Consumer, sticky_hash: int) -> bool:
        return self.tracker.draining_consumer(sticky_hash) is consumer

    def subscription_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.tracker.subscription_stats().to_json(with_hashes=False)
        stats["allowOutOfOrderDelivery"] = self.allow_out_of_order
        stats["keySharedMode"] = MODE_NAMES.get(self.mode if self.mode is not None else AUTO_SPLIT)
        return stats


def with_timers(factory: DispatcherFactory,
                wake_up: Callable[[KeySharedDispatcher, int], None] | None = None) -> DispatcherFactory:
    """A dispatcher factory whose Key_Shared dispatchers are ``timer_driven``: for a shell
    that calls ``on_timer`` when ``next_deadline_ms()`` comes (``Topic(dispatcher_factory=…)``).
    ``wake_up(dispatcher, deadline_ms)``, when given, is each dispatcher's alarm."""
    def make(sub: SubscriptionView, sub_type: str) -> Dispatcher:
        dispatcher = factory(sub, sub_type)
        if isinstance(dispatcher, KeySharedDispatcher):
            dispatcher.timer_driven = True
            if wake_up is not None:
                alarm = wake_up
                dispatcher.wake_up = lambda deadline: alarm(dispatcher, deadline)
        return dispatcher
    return make
