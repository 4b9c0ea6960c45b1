"""Delayed delivery on a topic: which entries wait, and which came due.

Pulsar honours ``deliver_at_time`` only on Shared and Key_Shared subscriptions; other
types deliver at once. Each such subscription gets a tracker (in-memory or
bucket-based, chosen by ``delayedDeliveryTrackerFactoryClassName``) the first time it
meets a delayed entry. An entry the tracker already indexes is never indexed twice:
``contains_message`` is asked first, so a re-read after a rewind only holds it back.

With ``delayedDeliverySharedIndexEnabled`` the topic keeps one tracker for all its
subscriptions (``SharedDelayedDeliveryIndex``) and each subscription's tracker is a view
of it: a message is indexed once however many subscriptions read it, and its snapshot
list lives in a topic-level record (``SHARED_INDEX_CURSOR``) instead of each cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker, clean_residual_snapshots
from magnetar.core.delayed.bucket_snapshot_storage import BucketSnapshotStorage
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.shared_index import SharedDelayedDeliveryIndex, SubscriptionDelayedDeliveryView
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.entry import EntryInfo
from magnetar.core.positions import Position

if TYPE_CHECKING:
    from magnetar.core.subscriptions.subscription_view import SubscriptionView, TopicView

DELAYED_TYPES = ("Shared", "Key_Shared")
BUCKET_FACTORY_SUFFIX = "BucketDelayedDeliveryTrackerFactory"
#: The topic-level record of a shared index's bucket snapshots (a cursor that is no subscription).
SHARED_INDEX_CURSOR = "pulsar.delayed.index"
TrackerFactory = Callable[["SubscriptionView"], DelayedDeliveryTracker]
SharedTrackerFactory = Callable[["TopicView"], DelayedDeliveryTracker]
#: Reads an entry and its metadata facts once for the hold-back check and the send after it.
EntryReader = Callable[[Position], "tuple[bytes, EntryInfo] | None"]
LatencyClock = Callable[[], float]
T = TypeVar("T", bound=DelayedDeliveryTracker)


def in_memory_tracker(config: BrokerConfig) -> InMemoryDelayedDeliveryTracker:
    return InMemoryDelayedDeliveryTracker(
        tick_time_ms=config.delayedDeliveryTickTimeMillis,
        is_delayed_delivery_deliver_at_time_strict=config.isDelayedDeliveryDeliverAtTimeStrict)


@dataclass(frozen=True, slots=True)
class _InMemoryTrackers:
    """A TrackerFactory as one object rather than a closure and its cell: every loaded
    topic holds one, and every object is one more for each garbage collection to walk."""

    config: BrokerConfig

    def __call__(self, _sub: SubscriptionView) -> DelayedDeliveryTracker:
        return in_memory_tracker(self.config)


def in_memory_factory(config: BrokerConfig) -> TrackerFactory:
    return _InMemoryTrackers(config)


def uses_buckets(config: BrokerConfig) -> bool:
    return config.delayedDeliveryTrackerFactoryClassName.endswith(BUCKET_FACTORY_SUFFIX)


def bucket_tracker(config: BrokerConfig, storage: BucketSnapshotStorage, topic_name: str, cursor_name: str,
                   is_acknowledged: Callable[[int, int], bool],
                   latency_clock_ms: LatencyClock | None = None) -> BucketDelayedDeliveryTracker:
    """A PIP-195 tracker configured from the broker config; snapshots go to ``storage``."""
    return BucketDelayedDeliveryTracker(
        storage,
        tick_time_ms=config.delayedDeliveryTickTimeMillis,
        is_delayed_delivery_deliver_at_time_strict=config.isDelayedDeliveryDeliverAtTimeStrict,
        min_index_count_per_bucket=config.delayedDeliveryMinIndexCountPerBucket,
        max_time_step_per_bucket_snapshot_segment_ms=(
            config.delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds * 1000),
        max_indexes_per_bucket_snapshot_segment=config.delayedDeliveryMaxIndexesPerBucketSnapshotSegment,
        max_num_buckets=config.delayedDeliveryMaxNumBuckets,
        topic_name=topic_name, cursor_name=cursor_name,
        is_acknowledged=is_acknowledged, latency_clock_ms=latency_clock_ms)


def bucket_factory(config: BrokerConfig, storage: BucketSnapshotStorage,
                   latency_clock_ms: LatencyClock | None = None) -> TrackerFactory:
    """PIP-195 trackers whose snapshots go to ``storage``; they see the cursor's acks.
    ``latency_clock_ms`` (the shell's monotonic clock) times snapshot operations for metrics."""

    def make(sub: SubscriptionView) -> DelayedDeliveryTracker:
        cursor = sub.cursor
        return bucket_tracker(config, storage, str(sub.topic.name), sub.name,
                              lambda ledger, entry: cursor.is_acked(Position(ledger, entry)), latency_clock_ms)
    return make


def shared_bucket_factory(config: BrokerConfig, storage: BucketSnapshotStorage,
                          latency_clock_ms: LatencyClock | None = None) -> SharedTrackerFactory:
    """One PIP-195 tracker per topic; a position counts as acknowledged only when every
    durable subscription of the topic acknowledged it."""

    def make(topic: TopicView) -> DelayedDeliveryTracker:
        def acknowledged_everywhere(ledger: int, entry: int) -> bool:
            pos = Position(ledger, entry)
            subs = [s for s in topic.subscriptions.values() if s.durable]
            return bool(subs) and all(s.cursor.is_acked(pos) for s in subs)
        return bucket_tracker(config, storage, str(topic.name), SHARED_INDEX_CURSOR,
                              acknowledged_everywhere, latency_clock_ms)
    return make


def delayed_delivery(config: BrokerConfig, storage: BucketSnapshotStorage | None,
                     enabled: Callable[[], bool] | None = None,
                     latency_clock_ms: LatencyClock | None = None) -> DelayedDelivery:
    """The topic's delayed delivery as the config asks: tracker kind, shared or not (bucket
    trackers need ``storage``)."""
    storage = storage if uses_buckets(config) else None
    factory = bucket_factory(config, storage, latency_clock_ms) if storage is not None else in_memory_factory(config)
    shared: SharedTrackerFactory | None = None
    if config.delayedDeliverySharedIndexEnabled:
        shared = shared_bucket_factory(config, storage, latency_clock_ms) if storage is not None \
            else (lambda _topic: in_memory_tracker(config))
    return DelayedDelivery(config, factory, enabled=enabled, shared_factory=shared, storage=storage)


def sync_properties(sub: SubscriptionView, tracker: DelayedDeliveryTracker | None) -> None:
    """Bucket trackers keep their bucket list in the cursor's properties (persisted with it)."""
    if not isinstance(tracker, BucketDelayedDeliveryTracker):
        return
    changes = tracker.take_property_changes()
    for key, value in changes:
        if value is None:
            sub.cursor.properties.pop(key, None)
        else:
            sub.cursor.properties[key] = value
    if changes:
        sub.cursor.version += 1


def has_bucket_properties(properties: dict[str, int | str]) -> bool:
    from magnetar.core.delayed.bucket import is_bucket_key
    return any(is_bucket_key(key) for key in properties)


def read_position(sub: SubscriptionView) -> Position:
    """The position after the last one the subscription's dispatcher read."""
    last = sub.dispatcher.last_read
    return Position(last.ledger_id, last.entry_id + 1)


class DelayedDelivery:
    def __init__(self, config: BrokerConfig, factory: TrackerFactory | None = None,
                 enabled: Callable[[], bool] | None = None,
                 shared_factory: SharedTrackerFactory | None = None,
                 storage: BucketSnapshotStorage | None = None) -> None:
        """``shared_factory`` makes the topic's one tracker when the index is shared;
        ``storage`` (bucket trackers) lets snapshots left by the other mode be deleted."""
        self.config = config
        self.factory = factory or in_memory_factory(config)
        self._enabled = enabled or (lambda: config.delayedDeliveryEnabled)
        self.shared_factory = shared_factory
        self.storage = storage
        #: the topic's shared index, made on first use or by ``recover_shared``
        self.shared_index: SharedDelayedDeliveryIndex | None = None
        #: the tick that applies to this topic (the ``delayedDelivery`` policy's ``tickTime``,
        #: else ``delayedDeliveryTickTimeMillis``): how early a message may go (non-strict)
        self.tick_time_ms = config.delayedDeliveryTickTimeMillis
        #: some subscription has had a tracker: the broker's tick visits this topic
        self.has_trackers = False
        #: told once, when the first tracker is made (the topic asks the tick to visit it)
        self.on_trackers: Callable[[], None] = _nothing

    def retick(self, tick_time_ms: int, subscriptions: Iterable[SubscriptionView]) -> None:
        """The policy's tick changed: trackers made from now on and those in use take it, as
        Pulsar's topics update their trackers when the policy changes."""
        if tick_time_ms == self.tick_time_ms:
            return
        self.tick_time_ms = tick_time_ms
        if self.shared_index is not None:
            self.shared_index.tracker.reset_tick_time(tick_time_ms)
        for sub in subscriptions:
            if sub.delayed_tracker is not None and not isinstance(sub.delayed_tracker, SubscriptionDelayedDeliveryView):
                sub.delayed_tracker.reset_tick_time(tick_time_ms)

    def _ticked(self, tracker: T) -> T:
        if not self.has_trackers:
            self.has_trackers = True
            self.on_trackers()
        if tracker.tick_time_ms != self.tick_time_ms:
            tracker.reset_tick_time(self.tick_time_ms)
        return tracker

    @property
    def shared(self) -> bool:
        return self.shared_factory is not None

    def holds(self, sub: SubscriptionView, pos: Position, now_ms: int, read: EntryReader | None = None) -> bool:
        """True when the entry at ``pos`` must wait for its delivery time.

        ``read`` lets the dispatcher parse the entry once for this check and the send
        that follows; without it the entry is read from the topic here."""
        if sub.sub_type not in DELAYED_TYPES:
            return False
        tracker = sub.delayed_tracker
        if tracker is not None and tracker.contains_message(pos.ledger_id, pos.entry_id):
            return True
        try:
            loaded = read(pos) if read is not None else (b"", EntryInfo.read(sub.topic.read_entry(pos)))
        except (KeyError, ValueError):
            return False
        if loaded is None:
            return False
        deliver_at_ms = loaded[1].deliver_at_ms
        if deliver_at_ms is None or not self._enabled():
            return False
        if tracker is None:
            # A shared index may hold a due message that another subscription indexed (or a
            # restart recovered): it reaches this subscription through the fan-out, so the
            # view must exist before this read goes past it.
            if deliver_at_ms <= now_ms and not self.shared:
                return False
            tracker = self.tracker_for(sub)
        elif deliver_at_ms <= now_ms and not isinstance(tracker, SubscriptionDelayedDeliveryView):
            return False
        # A view is told of due messages too: it holds those still in the index for the
        # fan-out, and one fanned out to it and read again leaves its queue.
        held = bool(tracker.add_message(pos.ledger_id, pos.entry_id, deliver_at_ms, now_ms))
        sync_properties(sub, tracker)
        return held

    def tracker_for(self, sub: SubscriptionView) -> DelayedDeliveryTracker:
        tracker = sub.delayed_tracker
        if tracker is None:
            tracker = self._new_tracker(sub)
            sub.delayed_tracker = tracker
        return tracker

    def _new_tracker(self, sub: SubscriptionView) -> DelayedDeliveryTracker:
        if self.shared_factory is None:
            return self._ticked(self.factory(sub))
        index = self.index_of(sub.topic)
        index.unregister(sub.name)  # a view left by an earlier subscription of that name
        cursor = sub.cursor
        return index.register(sub.name, lambda: cursor.mark_delete, lambda: read_position(sub))

    def index_of(self, topic: TopicView) -> SharedDelayedDeliveryIndex:
        """The topic's shared index, made on first use."""
        assert self.shared_factory is not None, "the index is not shared"
        if self.shared_index is None:
            self.shared_index = SharedDelayedDeliveryIndex(self._ticked(self.shared_factory(topic)))
        return self.shared_index

    # -- restart ---------------------------------------------------------------------------

    def recover(self, sub: SubscriptionView, now_ms: int) -> None:
        """After a restart: rebuild the tracker from the bucket list in the cursor's properties.

        With a shared index, a bucket list in a cursor is left from running unshared: its
        snapshots are deleted, and the subscription's re-read indexes the messages anew."""
        if not has_bucket_properties(sub.cursor.properties):
            return
        if self.shared:
            self._drop_subscription_snapshots(sub)
            return
        tracker = self._ticked(self.factory(sub))
        sub.delayed_tracker = tracker
        if isinstance(tracker, BucketDelayedDeliveryTracker):
            tracker.recover(dict(sub.cursor.properties), now_ms, sub.cursor.mark_delete)
        sync_properties(sub, tracker)

    def _drop_subscription_snapshots(self, sub: SubscriptionView) -> None:
        if self.storage is None:
            return
        for key in clean_residual_snapshots(dict(sub.cursor.properties), self.storage):
            sub.cursor.properties.pop(key, None)
        sub.cursor.version += 1

    def recover_shared(self, topic: TopicView, properties: dict[str, int | str], now_ms: int) -> int:
        """Rebuild the shared index from its topic-level record; how many messages came back.

        Positions at or before every subscription's mark-delete are acknowledged everywhere
        and are not loaded."""
        marks = [s.cursor.mark_delete for s in topic.subscriptions.values() if s.durable]
        return self.index_of(topic).recover(properties, now_ms, min(marks) if marks else None)

    # -- subscriptions and topics going away ----------------------------------------------

    def remove_subscription(self, topic: TopicView, sub: SubscriptionView) -> None:
        """The subscription was deleted: its tracker's snapshots go; a shared index's go with
        the topic's last subscription."""
        tracker, sub.delayed_tracker = sub.delayed_tracker, None
        if isinstance(tracker, SubscriptionDelayedDeliveryView):
            tracker.close()
        elif tracker is not None:
            tracker.clear()
        if self.shared_index is not None and not topic.subscriptions:
            self.shared_index.clear()

    def release(self, topic: TopicView, delete_data: bool) -> None:
        """The topic is unloaded (snapshots stay for the next start) or deleted (they go)."""
        for sub in topic.subscriptions.values():
            tracker = sub.delayed_tracker
            if isinstance(tracker, SubscriptionDelayedDeliveryView):
                # only its queue: unregistering one by one would trim the index to the
                # mark-delete of the subscriptions left and delete snapshots still needed
                tracker.clear()
            elif tracker is not None and delete_data:
                tracker.clear()
            elif tracker is not None:
                tracker.close()
        index = self.shared_index
        if index is not None:
            if delete_data:
                index.clear()
            else:
                index.close()


def take_due(sub: SubscriptionView, now_ms: int, max_messages: int = 1000) -> list[Position]:
    """Delayed entries of ``sub`` whose time has come, oldest first."""
    tracker = sub.delayed_tracker
    if tracker is None or not tracker.has_message_available(now_ms):
        return []
    due = [Position(*p) for p in tracker.get_scheduled_messages(max_messages, now_ms)]
    sync_properties(sub, tracker)
    return due


def next_delivery_ms(sub: SubscriptionView) -> int | None:
    tracker = sub.delayed_tracker
    return None if tracker is None else tracker.next_delivery_time_ms()


def _nothing() -> None:
    """No one to tell."""
