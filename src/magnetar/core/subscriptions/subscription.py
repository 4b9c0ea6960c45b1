"""A subscription: a named cursor on a topic plus the dispatcher of its type.

The subscription's type is fixed by its first consumer; while consumers are attached
a consumer of another type is refused, as Pulsar does. Non-durable subscriptions
(readers) disappear with their last consumer.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.dispatchers.base import Dispatcher, DispatcherFactory
from magnetar.core.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.core.dispatchers.single_active_consumer import SingleActiveConsumerDispatcher
from magnetar.core.entry import EntryInfo, with_earlier_chunks
from magnetar.core.errors import ConsumerBusy, NotAllowed
from magnetar.core.positions import Position
from magnetar.core.stats import RateCounter
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor import Cursor
from magnetar.core.subscriptions.subscription_view import EntrySource, SubscriptionView, TopicView

SUB_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def default_dispatcher(sub: SubscriptionView, sub_type: str) -> Dispatcher:
    if sub_type in ("Exclusive", "Failover"):
        return SingleActiveConsumerDispatcher(sub, failover=sub_type == "Failover")
    if sub_type == "Key_Shared":
        if sub.topic.config.subscriptionKeySharedUseClassicPersistentImplementation:
            from magnetar.core.dispatchers.key_shared_classic import KeySharedClassicDispatcher
            return KeySharedClassicDispatcher(sub)
        from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
        return KeySharedDispatcher(sub)
    return MultipleConsumersDispatcher(sub)


class Subscription:
    def __init__(self, topic: TopicView, cursor: Cursor, sub_type: str,
                 dispatcher_factory: DispatcherFactory = default_dispatcher) -> None:
        self.topic = topic
        self.source: EntrySource = topic
        self.cursor = cursor
        self.sub_type = sub_type
        self.redelivery_counts: dict[Position, int] = {}
        self.max_unacked_per_consumer = topic.config.maxUnackedMessagesPerConsumer
        self.max_unacked_per_subscription = topic.config.maxUnackedMessagesPerSubscription
        self.properties: dict[str, str] = {}
        #: messages expired by TTL or on request: ``msgRateExpired``, ``totalMsgExpired``,
        #: ``lastExpireTimestamp`` (the counter's ``last_ms``)
        self.expired = RateCounter()
        self.delayed_tracker: DelayedDeliveryTracker | None = None
        #: the cursor version last handed to the store (-1: never, or the write failed)
        self.persisted_version = -1
        #: when a consumer last attached, left or acknowledged (subscription expiration)
        self.last_active_ms = 0
        self._factory = dispatcher_factory
        self.dispatcher: Dispatcher = dispatcher_factory(self, sub_type)

    @property
    def name(self) -> str:
        return self.cursor.name

    @property
    def durable(self) -> bool:
        return self.cursor.durable

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers

    # -- consumers -------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        sub_type = consumer.sub_type
        if self.consumers and sub_type != self.sub_type:
            raise ConsumerBusy(f"Subscription {self.name} is of different type ({self.sub_type})")
        if sub_type != self.sub_type or not self.consumers:
            last_read = self.dispatcher.last_read
            self.sub_type = sub_type
            self.dispatcher = self._factory(self, sub_type)
            self.dispatcher.seek(min(last_read, self.cursor.mark_delete))
        self.dispatcher.add_consumer(consumer, now_ms)
        self.last_active_ms = max(self.last_active_ms, now_ms)

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        self.dispatcher.remove_consumer(consumer, now_ms)
        self.last_active_ms = max(self.last_active_ms, now_ms)

    # -- acknowledgements -------------------------------------------------
    def acknowledge(self, consumer: Consumer, cumulative: bool,
                    acks: list[tuple[Position, list[int] | None]], now_ms: int) -> None:
        self._check_not_beyond_the_end(acks)
        if cumulative:
            if self.sub_type in ("Shared", "Key_Shared"):
                raise NotAllowed(f"Cumulative ack is not allowed on a {self.sub_type} subscription")
            pos, ack_set = acks[-1]
            self.cursor.ack_cumulative(pos, ack_set)
            consumer.remove_pending_up_to(pos if not ack_set else Position(pos.ledger_id, pos.entry_id - 1))
        else:
            # dispatch only once every ack of the command is applied: an entry acked later in
            # this same list must not be sent out again in between
            others: list[Consumer] = []
            for pos, ack_set in acks:
                self.cursor.ack(pos, ack_set)
                if self.cursor.is_acked(pos):
                    other = self._forget(consumer, pos)
                    if other is not None and other not in others:
                        others.append(other)
            for other in others:
                self.dispatcher.on_acked(other, now_ms)
        consumer.acks.add(now_ms, len(acks))
        self.last_active_ms = max(self.last_active_ms, now_ms)
        self._drop_acked_counts()
        self.dispatcher.on_acked(consumer, now_ms)

    def _check_not_beyond_the_end(self, acks: list[tuple[Position, list[int] | None]]) -> None:
        """An ack for a message that does not exist yet is refused, not stored: a
        mark-delete position past the end would silently swallow what is published next."""
        last = self.topic.last_readable()
        for pos, _ in acks:
            if last is None or pos > last:
                raise NotAllowed(f"Cannot acknowledge {pos} on {self.topic.name}: "
                                 f"its last message is {last if last is not None else 'none'}")

    def _forget(self, consumer: Consumer, pos: Position) -> Consumer | None:
        """Drop an acknowledged entry from the pending entries; the other consumer that held it, if any."""
        self.redelivery_counts.pop(pos, None)
        if consumer.remove_pending(pos) is None:
            for other in self.consumers:
                if other.remove_pending(pos) is not None:
                    return other
        return None

    def _drop_acked_counts(self) -> None:
        if self.redelivery_counts:
            mark = self.cursor.mark_delete
            stale = [p for p in self.redelivery_counts if p <= mark]
            for p in stale:
                del self.redelivery_counts[p]

    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None:
        if positions is not None:
            positions = with_earlier_chunks(positions, consumer.pending, self.topic.read_entry)
        self.dispatcher.redeliver(consumer, positions, now_ms)

    # -- cursor moves ------------------------------------------------------
    def reset_cursor(self, mark_delete: Position, now_ms: int) -> None:
        """Seek: detach every consumer (they reconnect) and read again after ``mark_delete``."""
        for consumer in list(self.consumers):
            consumer.sink.close_consumer(consumer.consumer_id)
            self.dispatcher.remove_consumer(consumer, now_ms)
        self.cursor.reset(mark_delete)
        self.redelivery_counts.clear()
        self.dispatcher.seek(mark_delete)
        if self.delayed_tracker is not None:
            self.delayed_tracker.clear()

    def skip_all(self, now_ms: int) -> int:
        last = self.topic.last_readable()
        skipped = self.backlog()
        if last is not None:
            self.cursor.ack_cumulative(last)
        for consumer in self.consumers:
            consumer.take_all_pending()
        self.redelivery_counts.clear()
        self.dispatcher.rewind()
        return skipped

    def delayed_holds(self, pos: Position, now_ms: int,
                      read: Callable[[Position], tuple[bytes, EntryInfo] | None] | None = None) -> bool:
        """Delayed delivery hook for Shared/Key_Shared; the topic wires in a tracker.
        ``read`` is the dispatcher's entry reader, so the entry is parsed only once."""
        return self.topic.delayed_holds(self, pos, now_ms, read)

    # -- numbers ---------------------------------------------------------------
    def backlog(self) -> int:
        """Entries after the mark-delete position not individually acknowledged."""
        last = self.topic.last_readable()
        if last is None or last <= self.cursor.mark_delete:
            return 0
        first = self.topic.next_position(self.cursor.mark_delete)
        total = self.topic.entries_between(first, last)
        return max(0, total - len(self.cursor.individually_deleted))

    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)
