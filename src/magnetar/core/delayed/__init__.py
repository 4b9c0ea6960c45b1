"""Delayed message delivery: the trackers a Shared or Key_Shared dispatcher consults.

Layering, bottom up:

- ``triple_long_priority_queue``, ``delayed_message_index``: compact containers (a heap of
  packed (time, ledger, entry) ints; per-ledger roaring bitmaps of positions).
- ``tracker``: the interface the dispatcher calls and the tick rules.
- ``in_memory_tracker``: Pulsar's in-memory tracker, for small topics.
- ``snapshot_format``, ``bucket_snapshot_storage``, ``bucket``, ``mutable_bucket``,
  ``immutable_bucket``, ``bucket_delayed_message_index_stats``,
  ``bucket_delayed_delivery_tracker``: PIP-195's bucket tracker, which keeps most of the
  index in stored snapshots.
- ``shared_index``: one index per topic shared by all subscriptions.
"""

from magnetar.core.delayed.bucket import DELAYED_BUCKET_KEY_PREFIX, bucket_key, parse_bucket_key
from magnetar.core.delayed.bucket_delayed_delivery_tracker import (
    BucketDelayedDeliveryTracker,
    PropertyChange,
    RecoverDelayedDeliveryTrackerError,
    clean_residual_snapshots,
)
from magnetar.core.delayed.bucket_delayed_message_index_stats import (
    BucketDelayedMessageIndexStats,
    MetricSample,
    OpState,
    OpType,
)
from magnetar.core.delayed.bucket_snapshot_storage import (
    BucketNotExistError,
    BucketSnapshotError,
    BucketSnapshotPersistenceError,
    BucketSnapshotStorage,
    MemoryBucketSnapshotStorage,
)
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.shared_index import SharedDelayedDeliveryIndex, SubscriptionDelayedDeliveryView
from magnetar.core.delayed.tracker import DelayedDeliveryTracker

__all__ = [
    "DELAYED_BUCKET_KEY_PREFIX",
    "BucketDelayedDeliveryTracker",
    "BucketDelayedMessageIndexStats",
    "BucketNotExistError",
    "BucketSnapshotError",
    "BucketSnapshotPersistenceError",
    "BucketSnapshotStorage",
    "DelayedDeliveryTracker",
    "InMemoryDelayedDeliveryTracker",
    "MemoryBucketSnapshotStorage",
    "MetricSample",
    "OpState",
    "OpType",
    "PropertyChange",
    "RecoverDelayedDeliveryTrackerError",
    "SharedDelayedDeliveryIndex",
    "SubscriptionDelayedDeliveryView",
    "bucket_key",
    "clean_residual_snapshots",
    "parse_bucket_key",
]
