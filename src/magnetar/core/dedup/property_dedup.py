"""Deduplication by a message property within a time window (a Magnetar extension): which
window a topic's policies want, how it is recovered at load, and what its snapshot holds.

For producers whose retries carry the same business id (``__dedup_id`` by default)
but not the same sequence id, such as non-replayable sources. Enabled per namespace
by the ``propertyDeduplication`` policy (``propertyName``, ``windowSeconds``,
``maxIds``) or broker-wide by ``brokerPropertyDeduplicationEnabled``. It applies to
non-batched messages: a batch is one entry and cannot be stored in part.

State survives restarts: a snapshot of the window (durable ids and first-seen times)
is kept in the metadata store with the position it covers, and the entries written
after it are replayed when the topic loads. The shell reads and writes the snapshots.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.entry import EntryInfo
from magnetar.core.policies import PropertyDeduplicationPolicy, property_deduplication
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.publish import business_id
from magnetar.core.topics.topic import Topic

#: the metadata store's key of a topic's snapshot is this followed by the topic's name
SNAPSHOT_PREFIX = "property-dedup/"


def policy(policies: PolicyCache, config: BrokerConfig, topic: Topic) -> PropertyDeduplicationPolicy | None:
    if not topic.name.persistent:
        return None
    return property_deduplication(policies.policies_of(topic.name), config)


def dedup_id_of(window: PropertyDedupWindow, entry: bytes) -> tuple[str | None, int]:
    """The entry's business id (None for batches or messages without it) and publish time."""
    info = EntryInfo.read(entry)
    return business_id(window, info), info.publish_time_ms


def refresh(topic: Topic, policies: PolicyCache, config: BrokerConfig, stored: Callable[[str], Any]) -> None:
    """Give the topic the window its policy wants; a new window is recovered from the
    snapshot ``stored`` reads (by its key) and the entries after it."""
    wanted = policy(policies, config, topic)
    if wanted is None:
        topic.property_dedup = None
        return
    if not _new_window(topic, wanted):
        return
    window = PropertyDedupWindow(wanted.windowSeconds * 1000, wanted.maxIds, wanted.propertyName)
    recover(topic, window, stored(SNAPSHOT_PREFIX + str(topic.name)))
    topic.property_dedup = window


def needs_snapshot(topic: Topic, policies: PolicyCache, config: BrokerConfig) -> bool:
    """Whether :func:`refresh` would make a new window, and so read its stored snapshot."""
    wanted = policy(policies, config, topic)
    return wanted is not None and _new_window(topic, wanted)


def _new_window(topic: Topic, wanted: PropertyDeduplicationPolicy) -> bool:
    current = topic.property_dedup
    return current is None or (current.window_ms, current.max_ids, current.property_name) != \
        (wanted.windowSeconds * 1000, wanted.maxIds, wanted.propertyName)


def recover(topic: Topic, window: PropertyDedupWindow, stored: Any) -> None:
    """The stored snapshot (None when there is none), then every entry after it."""
    pos = BEFORE_START
    if isinstance(stored, dict):
        window.restore(base64.b64decode(stored["snapshot"]))
        pos = Position.parse(stored["position"])
    last = topic.ledger.last_position()
    while last is not None and pos < last:
        pos = topic.ledger.next_position(pos)
        if pos > last:
            break
        dedup_id, published_ms = dedup_id_of(window, topic.ledger.read(pos))
        if dedup_id is not None:
            window.record_persisted(dedup_id, published_ms)


def snapshots(topics: Iterable[Topic]) -> Iterator[tuple[str, dict[str, str]]]:
    """The key and value of each window's snapshot to store, up to what is durable."""
    for topic in topics:
        window = topic.property_dedup
        if window is None or topic.last_durable is None:
            continue
        yield SNAPSHOT_PREFIX + str(topic.name), {
            "position": str(topic.last_durable), "snapshot": base64.b64encode(window.snapshot()).decode()}

