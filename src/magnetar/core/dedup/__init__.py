"""Effectively-once publishing: deduplication of what producers send.

Two mechanisms, both sans-IO (the shell reads and writes storage, time comes in as
``now_ms``):

* :class:`MessageDeduplication` — Pulsar's producer deduplication by sequence id,
  with snapshots in the ``pulsar.dedup`` cursor and recovery by replay
  (``message_deduplication``, ``dedup_snapshot``, ``deduplication_config``).
* :class:`PropertyDedupWindow` — Magnetar's deduplication by a message property
  within a bounded time window, for sources that cannot replay with the same
  sequence ids (``property_dedup_window``).
"""

from magnetar.core.dedup.dedup_snapshot import DEDUPLICATION_CURSOR_NAME, DedupSnapshot
from magnetar.core.dedup.deduplication_config import CONFIG_KEYS, DeduplicationConfig
from magnetar.core.dedup.message_deduplication import (
    NO_SEQUENCE_ID,
    DedupAction,
    DeduplicationStats,
    DedupOutcome,
    DedupStateError,
    DedupStatus,
    MessageDeduplication,
    classify_send,
)
from magnetar.core.dedup.property_dedup_window import (
    BYTES_PER_ID_MAX,
    BYTES_PER_PENDING_ID_MAX,
    DEFAULT_PROPERTY_NAME,
    PropertyDedupStats,
    PropertyDedupWindow,
)

__all__ = [
    "BYTES_PER_ID_MAX",
    "BYTES_PER_PENDING_ID_MAX",
    "CONFIG_KEYS",
    "DEDUPLICATION_CURSOR_NAME",
    "DEFAULT_PROPERTY_NAME",
    "NO_SEQUENCE_ID",
    "DedupAction",
    "DedupOutcome",
    "DedupSnapshot",
    "DedupStateError",
    "DedupStatus",
    "DeduplicationConfig",
    "DeduplicationStats",
    "MessageDeduplication",
    "PropertyDedupStats",
    "PropertyDedupWindow",
    "classify_send",
]
