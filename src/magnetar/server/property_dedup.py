"""Deduplication by a message property (:mod:`magnetar.core.dedup.property_dedup`) in the
broker shell: the window's snapshot read from and written to the metadata store.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from magnetar.core.dedup import property_dedup
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.topics.topic import Topic
from magnetar.server.topic_opening import StoredTopic
from magnetar.storage.metadata_calls import metadata_call, shared_store

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell


def refresh(broker: BrokerShell, topic: Topic, stored: StoredTopic | None = None) -> bool:
    """A new window recovers from the stored snapshot (a loading topic's from ``stored``).
    True when a loaded topic of a shared store follows a policy change: the snapshot it may
    need is then read off the event loop first (:func:`refresh_from_store`)."""
    if stored is None and shared_store(broker) and property_dedup.needs_snapshot(topic, broker.policies, broker.config):
        return True
    snapshot = (lambda _key: stored.property_dedup) if stored is not None else broker.metadata.get_json
    property_dedup.refresh(topic, broker.policies, broker.config, snapshot)
    return False


async def refresh_from_store(broker: BrokerShell, topic: Topic) -> None:
    """:func:`refresh` for a loaded topic, with its snapshot read on the metadata writer's thread."""
    key = property_dedup.SNAPSHOT_PREFIX + str(topic.name)
    value = await metadata_call(broker, lambda store: store.get_json(key))
    if broker.topics.get(str(topic.name)) is topic:
        property_dedup.refresh(topic, broker.policies, broker.config, lambda _key: value)


def store_snapshots(broker: BrokerShell) -> None:
    for key, value in property_dedup.snapshots(broker.core.deduplicating_topics()):
        broker.writer.submit(partial(_put_json, key=key, value=value))


def _put_json(store: BrokerMetadataStore, key: str, value: dict[str, str]) -> None:
    store.put_json(key, value)
