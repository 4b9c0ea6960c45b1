"""Exclusive and Failover: one active consumer reads the subscription in order.

Failover picks the active consumer as Pulsar does: consumers sorted by priority level
then name; on a partition, index ``partition % count`` among the best priority level;
otherwise the first of them, so the choice does not depend on who connected first. A
change of active consumer rewinds to the first unacknowledged entry, so the new one
sees everything the old one left unacked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.core.dispatchers.base import Dispatcher
from magnetar.core.errors import ConsumerBusy
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer

if TYPE_CHECKING:
    from magnetar.core.subscriptions.subscription_view import SubscriptionView


class SingleActiveConsumerDispatcher(Dispatcher):
    def __init__(self, sub: SubscriptionView, failover: bool) -> None:
        super().__init__(sub)
        self.failover = failover
        self.active: Consumer | None = None

    def active_consumer(self) -> Consumer | None:
        return self.active

    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if not self.failover and self.consumers:
            raise ConsumerBusy(f"Exclusive consumer is already connected on subscription {self.sub.name}")
        self.consumers.append(consumer)
        self._pick_active(notify_all=False)
        if self.failover:
            consumer.sink.send_active_consumer_change(consumer.consumer_id, consumer is self.active)

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self._redeliver_pending(consumer)
        if consumer is self.active:
            self.active = None
        self._pick_active(notify_all=True)
        self.dispatch(now_ms)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None:
        # Pulsar treats a list on Exclusive/Failover as "redeliver all".
        self._redeliver_pending(consumer)
        consumer.redeliver.add(now_ms, 1)
        self.dispatch(now_ms)

    def dispatch(self, now_ms: int) -> None:
        consumer = self.active
        while consumer is not None and consumer.can_take():
            pos = self.next_unread()
            if pos is None:
                return
            loaded = self.load(pos)
            if loaded is not None:
                self.send(consumer, pos, loaded, now_ms)

    def _redeliver_pending(self, consumer: Consumer) -> None:
        pending = consumer.take_all_pending()
        for pos in pending:
            self.sub.redelivery_counts[pos] = self.sub.redelivery_counts.get(pos, 0) + 1
        if pending and consumer is self.active:
            self.rewind()

    def _pick_active(self, notify_all: bool) -> None:
        chosen = self._choose()
        if chosen is self.active:
            return
        if self.active is not None:
            self.active.take_all_pending()
        self.active = chosen
        self.rewind()
        if self.failover and notify_all:
            for consumer in self.consumers:
                consumer.sink.send_active_consumer_change(consumer.consumer_id, consumer is chosen)
        elif self.failover and chosen is not None and len(self.consumers) > 1:
            for consumer in self.consumers[:-1]:
                consumer.sink.send_active_consumer_change(consumer.consumer_id, consumer is chosen)

    def _choose(self) -> Consumer | None:
        if not self.consumers:
            return None
        best = min(c.priority_level for c in self.consumers)
        candidates = sorted((c for c in self.consumers if c.priority_level == best), key=lambda c: c.consumer_name)
        partition = self.source.partition_index
        return candidates[partition % len(candidates) if partition >= 0 else 0]
