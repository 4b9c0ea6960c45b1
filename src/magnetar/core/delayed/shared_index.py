"""One delayed-message index per topic, shared by its subscriptions
(``delayedDeliverySharedIndexEnabled``; PIP-195's optional part, which Pulsar never built).

Every message is indexed once, in one tracker (normally a ``BucketDelayedDeliveryTracker``
whose snapshot properties live on a topic-level cursor). Each subscription gets a
``SubscriptionDelayedDeliveryView`` that its dispatcher uses as its tracker. When any of
them asks for due messages, the due positions leave the shared tracker and are fanned out
to every registered subscription's queue.

A position goes to a subscription only if it lies after the subscription's mark-delete
(not yet acknowledged) and before its read position (its dispatcher already read past it
and held it back). A subscription that has not read that far will read the message itself,
find it due and no longer in the index, and deliver it directly; so each subscription gets
each message once, also when subscriptions read at different speeds or rewind. The filter
is applied again when a subscription takes from its queue, since its positions may have
moved meanwhile, and a queued position the subscription reads again (its cursor rewound)
leaves the queue and is delivered from that read.

A view's ``add_message`` answers True (hold it) for any position in the index, due or not:
the fan-out delivers it, and un-indexing it for one subscription would lose it for the
others. Otherwise the view adds the message to the shared index itself, so whichever
subscription reads a message first indexes it. Nothing needs a reading cursor of its own;
the shared tracker forgets positions at or before the lowest mark-delete of all
subscriptions (``index_mark_delete_position``), which is also where the topic-level cursor
holding the index's properties should keep its own mark-delete, so that a restart re-reads
everything the index held only in memory.

A bucket tracker's snapshot list is not kept in any subscription's cursor: the index
collects the tracker's property changes into ``properties`` (bumping ``version``), and the
shell persists them as one topic-level record and hands them back to ``recover`` after a
restart.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping

from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.positions import Position

_ENTRY_BITS = 32
_ENTRY_MASK = (1 << _ENTRY_BITS) - 1

PositionSource = Callable[[], Position]


class SharedDelayedDeliveryIndex:
    """Fans the due positions of one topic-wide tracker out to per-subscription queues."""

    def __init__(self, tracker: DelayedDeliveryTracker) -> None:
        self.tracker = tracker
        self._views: dict[str, SubscriptionDelayedDeliveryView] = {}
        #: the bucket snapshots the topic-level record must list (bucket trackers only)
        self.properties: dict[str, int] = {}
        #: bumped whenever ``properties`` changes, so the shell writes only what moved
        self.version = 0
        #: the version the shell last wrote (-1: never)
        self.persisted_version = -1
        #: the tracker when it keeps bucket snapshots (whose names the topic record lists)
        self._buckets = tracker if isinstance(tracker, BucketDelayedDeliveryTracker) else None

    def recover(self, properties: Mapping[str, int | str], now_ms: int,
                mark_delete_position: Position | None) -> int:
        """Rebuild a bucket tracker from the topic-level record; how many messages came back."""
        if self._buckets is None:
            return 0
        count = self._buckets.recover(properties, now_ms, mark_delete_position)
        self._buckets.take_property_changes()
        self.properties = dict(self._buckets.bucket_properties())
        self.version += 1
        return count

    def _collect_property_changes(self) -> None:
        if self._buckets is None:
            return
        changes = self._buckets.take_property_changes()
        if not changes:
            return
        for key, value in changes:
            if value is None:
                self.properties.pop(key, None)
            else:
                self.properties[key] = value
        self.version += 1

    def clear(self) -> None:
        """Delete every stored snapshot and forget everything (the topic's last subscription went)."""
        for view in self._views.values():
            view.clear()
        self.tracker.clear()
        self._collect_property_changes()

    def close(self) -> None:
        """Release memory; the stored snapshots stay for the next start."""
        self.tracker.close()

    def register(
        self,
        subscription_name: str,
        mark_delete_position: PositionSource,
        read_position: PositionSource,
    ) -> SubscriptionDelayedDeliveryView:
        """Attach a subscription; the callables give its current mark-delete and read positions."""
        if subscription_name in self._views:
            raise ValueError(f"subscription {subscription_name!r} is already registered with the delayed index")
        view = SubscriptionDelayedDeliveryView(self, subscription_name, mark_delete_position, read_position)
        self._views[subscription_name] = view
        return view

    def unregister(self, subscription_name: str) -> None:
        self._views.pop(subscription_name, None)
        self._trim()

    @property
    def subscriptions(self) -> list[str]:
        return list(self._views)

    def add_message(self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int) -> bool:
        """Index a message read by a topic-level reader (optional; views index on their own)."""
        if self.tracker.contains_message(ledger_id, entry_id):
            return True
        held = self.tracker.add_message(ledger_id, entry_id, deliver_at_ms, now_ms)
        self._collect_property_changes()
        return held

    def poll(self, max_messages: int, now_ms: int) -> int:
        """Move up to ``max_messages`` due positions to the subscriptions' queues."""
        due = self.tracker.get_scheduled_messages(max_messages, now_ms)
        if due:
            bounds = [(view, view.mark_delete_position(), view.read_position()) for view in self._views.values()]
            for position in due:
                packed = (position.ledger_id << _ENTRY_BITS) | position.entry_id
                for view, mark_delete, read in bounds:
                    if mark_delete < position < read:
                        view.enqueue(packed, now_ms)
        self._trim()
        self._collect_property_changes()
        return len(due)

    def index_mark_delete_position(self) -> Position | None:
        """The lowest mark-delete of all subscriptions; None when none is registered."""
        if not self._views:
            return None
        return min(view.mark_delete_position() for view in self._views.values())

    def _trim(self) -> None:
        position = self.index_mark_delete_position()
        if position is not None:
            self.tracker.on_mark_delete(position)
            self._collect_property_changes()


class SubscriptionDelayedDeliveryView:
    """One subscription's tracker when the index is shared (the dispatcher's interface)."""

    def __init__(
        self,
        index: SharedDelayedDeliveryIndex,
        subscription_name: str,
        mark_delete_position: PositionSource,
        read_position: PositionSource,
    ) -> None:
        self.subscription_name = subscription_name
        self.mark_delete_position = mark_delete_position
        self.read_position = read_position
        self._index = index
        # An ordered set: due positions in fan-out order, with membership for re-reads.
        self._queue: OrderedDict[int, None] = OrderedDict()
        self._oldest_enqueued_at_ms: int | None = None

    def enqueue(self, packed_position: int, now_ms: int) -> None:
        if not self._queue:
            self._oldest_enqueued_at_ms = now_ms
        self._queue[packed_position] = None

    @property
    def pending(self) -> int:
        """Due positions fanned out to this subscription and not yet taken."""
        return len(self._queue)

    # -- the tracker interface ----------------------------------------------------------

    def add_message(self, ledger_id: int, entry_id: int, deliver_at_ms: int, now_ms: int) -> bool:
        packed = (ledger_id << _ENTRY_BITS) | entry_id
        if packed in self._queue:
            # Fanned out to us, and now read again (the cursor rewound): it is due, deliver it
            # from this read rather than from the queue as well.
            del self._queue[packed]
            return False
        return self._index.add_message(ledger_id, entry_id, deliver_at_ms, now_ms)

    def has_message_available(self, now_ms: int) -> bool:
        return bool(self._queue) or self._index.tracker.has_message_available(now_ms)

    def get_scheduled_messages(self, max_messages: int, now_ms: int) -> list[Position]:
        if max_messages <= 0:
            return []
        self._index.poll(max_messages, now_ms)
        mark_delete, read = self.mark_delete_position(), self.read_position()
        positions: list[Position] = []
        queue = self._queue
        while queue and len(positions) < max_messages:
            packed, _ = queue.popitem(last=False)
            position = Position(packed >> _ENTRY_BITS, packed & _ENTRY_MASK)
            if mark_delete < position < read:
                positions.append(position)
        if not queue:
            self._oldest_enqueued_at_ms = None
        positions.sort()
        return positions

    def next_delivery_time_ms(self) -> int | None:
        if self._queue:
            return self._oldest_enqueued_at_ms
        return self._index.tracker.next_delivery_time_ms()

    def contains_message(self, ledger_id: int, entry_id: int) -> bool:
        return self._index.tracker.contains_message(ledger_id, entry_id)

    def held_run_end(self, ledger_id: int, entry_id: int) -> int:
        return self._index.tracker.held_run_end(ledger_id, entry_id)

    @property
    def number_of_delayed_messages(self) -> int:
        """The topic-wide count: a shared index has no exact per-subscription figure."""
        return self._index.tracker.number_of_delayed_messages

    @property
    def buffer_memory_bytes(self) -> int:
        return sys.getsizeof(self._queue) + 32 * len(self._queue)

    def should_pause_all_deliveries(self, now_ms: int) -> bool:
        return False

    def on_mark_delete(self, position: Position) -> None:
        self._index._trim()

    @property
    def tick_time_ms(self) -> int:
        return self._index.tracker.tick_time_ms

    def reset_tick_time(self, tick_time_ms: int) -> None:
        self._index.tracker.reset_tick_time(tick_time_ms)

    def clear(self) -> None:
        """Drop this subscription's due queue; the shared index belongs to the topic."""
        self._queue.clear()
        self._oldest_enqueued_at_ms = None

    def close(self) -> None:
        self.clear()
        self._index.unregister(self.subscription_name)
