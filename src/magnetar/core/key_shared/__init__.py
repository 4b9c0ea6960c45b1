"""Key_Shared building blocks: pure, sans-IO, one Pulsar concept per module.

- ``sticky_key``: a message's sticky key and its hash (1..65535).
- ``hash_ranges``: inclusive hash ranges and the STICKY range checks.
- ``consumer_hash_assignments_snapshot``: who owns which hashes, and the diff of two moments.
- ``sticky_key_consumer_selector``: the selector protocol; one module per algorithm:
  ``consistent_hashing``, ``hash_range_auto_split`` (AUTO_SPLIT) and ``hash_range_exclusive`` (STICKY).
- ``draining_hashes_tracker``: PIP-379's draining hashes, with blocking and batched unblocking.
- ``recently_joined_consumers``: the classic mode's rule, with PIP-282's last sent position.
"""

from magnetar.core.key_shared.consistent_hashing import (
    DEFAULT_REPLICA_POINTS,
    ConsistentHashingStickyKeyConsumerSelector,
)
from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    ImpactedConsumers,
    RemovedHashRanges,
    resolve_impacted_consumers,
)
from magnetar.core.key_shared.draining_hashes_tracker import (
    DEFAULT_UNBLOCKING_INTERVAL_MS,
    DrainingHash,
    DrainingHashEntry,
    DrainingHashesStats,
    DrainingHashesTracker,
)
from magnetar.core.key_shared.hash_range_auto_split import HashRangeAutoSplitStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_range_exclusive import (
    HashRangeExclusiveStickyKeyConsumerSelector,
    declared_hash_ranges,
)
from magnetar.core.key_shared.hash_ranges import (
    FULL_HASH_RANGE,
    ConsumerAssignError,
    HashRange,
    merge_ranges,
    validate_sticky_ranges,
)
from magnetar.core.key_shared.recently_joined_consumers import (
    CONTIGUOUS_ENTRIES,
    LedgerNavigator,
    RecentlyJoinedConsumers,
)
from magnetar.core.key_shared.sticky_key import (
    HASH_RANGE_SIZE,
    MAX_STICKY_KEY_HASH,
    NONE_KEY,
    STICKY_KEY_HASH_NOT_SET,
    sticky_key,
    sticky_key_hash,
)
from magnetar.core.key_shared.sticky_key_consumer_selector import StickyKeyConsumerSelector

__all__ = [
    "CONTIGUOUS_ENTRIES",
    "DEFAULT_REPLICA_POINTS",
    "DEFAULT_UNBLOCKING_INTERVAL_MS",
    "FULL_HASH_RANGE",
    "HASH_RANGE_SIZE",
    "MAX_STICKY_KEY_HASH",
    "NONE_KEY",
    "STICKY_KEY_HASH_NOT_SET",
    "ConsistentHashingStickyKeyConsumerSelector",
    "ConsumerAssignError",
    "ConsumerHashAssignmentsSnapshot",
    "DrainingHash",
    "DrainingHashEntry",
    "DrainingHashesStats",
    "DrainingHashesTracker",
    "HashRange",
    "HashRangeAutoSplitStickyKeyConsumerSelector",
    "HashRangeExclusiveStickyKeyConsumerSelector",
    "ImpactedConsumers",
    "LedgerNavigator",
    "RecentlyJoinedConsumers",
    "RemovedHashRanges",
    "StickyKeyConsumerSelector",
    "declared_hash_ranges",
    "merge_ranges",
    "resolve_impacted_consumers",
    "sticky_key",
    "sticky_key_hash",
    "validate_sticky_ranges",
]
