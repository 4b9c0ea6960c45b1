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

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell


def refresh(broker: BrokerShell, topic: Topic, stored: StoredTopic | None = None) -> None:
    """A new window recovers from the stored snapshot (a loading topic's from ``stored``)."""
    snapshot = (lambda _key: stored.property_dedup) if stored is not None else broker.metadata.get_json
    property_dedup.refresh(topic, broker.policies, broker.config, snapshot)


def store_snapshots(broker: BrokerShell) -> None:
    for key, value in property_dedup.snapshots(broker.core.deduplicating_topics()):
        broker.writer.submit(partial(_put_json, key=key, value=value))


def _put_json(store: BrokerMetadataStore, key: str, value: dict[str, str]) -> None:
    store.put_json(key, value)
