"""Delayed delivery on a topic: which entries wait, and which came due.

Pulsar honours ``deliver_at_time`` only on Shared and Key_Shared subscriptions; other
types deliver at once. Each such subscription gets a tracker (in-memory or
bucket-based, chosen by ``delayedDeliveryTrackerFactoryClassName``) the first time it
meets a delayed entry. An entry the tracker already indexes is never indexed twice:
``contains_message`` is asked first, so a re-read after a rewind only holds it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.config import BrokerConfig
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.entry import EntryInfo
from magnetar.core.positions import Position

if TYPE_CHECKING:
    from magnetar.core.subscription import Subscription

DELAYED_TYPES = ("Shared", "Key_Shared")
BUCKET_FACTORY_SUFFIX = "BucketDelayedDeliveryTrackerFactory"
TrackerFactory = Callable[["Subscription"], Any]


def in_memory_factory(config: BrokerConfig) -> TrackerFactory:
    def make(_sub: Subscription) -> Any:
        return InMemoryDelayedDeliveryTracker(
            tick_time_ms=config.delayedDeliveryTickTimeMillis,
            is_delayed_delivery_deliver_at_time_strict=config.isDelayedDeliveryDeliverAtTimeStrict)
    return make


def uses_buckets(config: BrokerConfig) -> bool:
    return config.delayedDeliveryTrackerFactoryClassName.endswith(BUCKET_FACTORY_SUFFIX)


def bucket_factory(config: BrokerConfig, storage: Any) -> TrackerFactory:
    """PIP-195 trackers whose snapshots go to ``storage``; they see the cursor's acks."""
    from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker

    def make(sub: Subscription) -> Any:
        cursor = sub.cursor
        return BucketDelayedDeliveryTracker(
            storage,
            tick_time_ms=config.delayedDeliveryTickTimeMillis,
            is_delayed_delivery_deliver_at_time_strict=config.isDelayedDeliveryDeliverAtTimeStrict,
            min_index_count_per_bucket=config.delayedDeliveryMinIndexCountPerBucket,
            max_time_step_per_bucket_snapshot_segment_ms=(
                config.delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds * 1000),
            max_indexes_per_bucket_snapshot_segment=config.delayedDeliveryMaxIndexesPerBucketSnapshotSegment,
            max_num_buckets=config.delayedDeliveryMaxNumBuckets,
            topic_name=str(sub.topic.name), cursor_name=sub.name,
            is_acknowledged=lambda ledger, entry: cursor.is_acked(Position(ledger, entry)))
    return make


def sync_properties(sub: Subscription, tracker: Any) -> None:
    """Bucket trackers keep their bucket list in the cursor's properties (persisted with it)."""
    take = getattr(tracker, "take_property_changes", None)
    if take is None:
        return
    changes = take()
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


class DelayedDelivery:
    def __init__(self, config: BrokerConfig, factory: TrackerFactory | None = None,
                 enabled: Callable[[], bool] | None = None) -> None:
        self.config = config
        self.factory = factory or in_memory_factory(config)
        self._enabled = enabled or (lambda: config.delayedDeliveryEnabled)

    def holds(self, sub: Subscription, pos: Position, now_ms: int) -> bool:
        """True when the entry at ``pos`` must wait for its delivery time."""
        if sub.sub_type not in DELAYED_TYPES:
            return False
        tracker = sub.delayed_tracker
        if tracker is not None and tracker.contains_message(pos.ledger_id, pos.entry_id):
            return True
        if not self._enabled():
            return False
        try:
            info = EntryInfo.read(sub.topic.read_entry(pos))
        except (KeyError, ValueError):
            return False
        if info.deliver_at_ms is None or info.deliver_at_ms <= now_ms:
            return False
        if tracker is None:
            tracker = sub.delayed_tracker = self.factory(sub)
        held = bool(tracker.add_message(pos.ledger_id, pos.entry_id, info.deliver_at_ms, now_ms))
        sync_properties(sub, tracker)
        return held

    def recover(self, sub: Subscription, now_ms: int) -> None:
        """After a restart: rebuild the tracker from the bucket list in the cursor's properties."""
        if not has_bucket_properties(sub.cursor.properties):
            return
        tracker = sub.delayed_tracker = self.factory(sub)
        tracker.recover(dict(sub.cursor.properties), now_ms, sub.cursor.mark_delete)
        sync_properties(sub, tracker)


def take_due(sub: Subscription, now_ms: int, max_messages: int = 1000) -> list[Position]:
    """Delayed entries of ``sub`` whose time has come, oldest first."""
    tracker = sub.delayed_tracker
    if tracker is None or not tracker.has_message_available(now_ms):
        return []
    due = [Position(*p) for p in tracker.get_scheduled_messages(max_messages, now_ms)]
    sync_properties(sub, tracker)
    return due


def next_delivery_ms(sub: Subscription) -> int | None:
    tracker = sub.delayed_tracker
    return None if tracker is None else tracker.next_delivery_time_ms()
