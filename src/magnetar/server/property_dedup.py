"""Deduplication by a message property within a time window (a Magnetar extension).

For producers whose retries carry the same business id (``__dedup_id`` by default)
but not the same sequence id, such as non-replayable sources. Enabled per namespace
by the ``propertyDeduplication`` policy (``propertyName``, ``windowSeconds``,
``maxIds``) or broker-wide by ``brokerPropertyDeduplicationEnabled``. It applies to
non-batched messages: a batch is one entry and cannot be stored in part.

State survives restarts: a snapshot of the window (durable ids and first-seen times)
is kept in the metadata store with the position it covers, and the entries written
after it are replayed when the topic loads.
"""

from __future__ import annotations

import base64
from functools import partial
from typing import TYPE_CHECKING, Any

from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.entry import EntryInfo
from magnetar.core.policies import PropertyDeduplicationPolicy, property_deduplication
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.publish import business_id
from magnetar.core.topics.topic import Topic
from magnetar.storage.metadata_store import MetadataStore

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

SNAPSHOT_PREFIX = "property-dedup/"


def policy(broker: BrokerShell, topic: Topic) -> PropertyDeduplicationPolicy | None:
    if not topic.name.persistent:
        return None
    return property_deduplication(broker.policies.policies_of(topic.name), broker.config)


def dedup_id_of(window: PropertyDedupWindow, entry: bytes) -> tuple[str | None, int]:
    """The entry's business id (None for batches or messages without it) and publish time."""
    info = EntryInfo.read(entry)
    return business_id(window, info), info.publish_time_ms


def refresh(broker: BrokerShell, topic: Topic) -> None:
    wanted = policy(broker, topic)
    if wanted is None:
        topic.property_dedup = None
        return
    window_ms, max_ids, name = wanted.windowSeconds * 1000, wanted.maxIds, wanted.propertyName
    current = topic.property_dedup
    wanted_shape = (window_ms, max_ids, name)
    if current is not None and (current.window_ms, current.max_ids, current.property_name) == wanted_shape:
        return
    window = PropertyDedupWindow(window_ms, max_ids, name)
    recover(broker, topic, window)
    topic.property_dedup = window


def recover(broker: BrokerShell, topic: Topic, window: PropertyDedupWindow) -> None:
    stored = broker.metadata.get_json(SNAPSHOT_PREFIX + str(topic.name))
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


def store_snapshots(broker: BrokerShell) -> None:
    for topic in broker.core.deduplicating_topics():
        window = topic.property_dedup
        if window is None or topic.last_durable is None:
            continue
        key, value = SNAPSHOT_PREFIX + str(topic.name), {
            "position": str(topic.last_durable), "snapshot": base64.b64encode(window.snapshot()).decode()}
        broker.writer.submit(partial(_put_json, key=key, value=value))


def _put_json(store: MetadataStore, key: str, value: dict[str, str]) -> None:
    store.put_json(key, value)


def stats(window: PropertyDedupWindow | None) -> dict[str, Any] | None:
    if window is None:
        return None
    s = window.stats()
    return {name: getattr(s, name) for name in s.__dataclass_fields__}
