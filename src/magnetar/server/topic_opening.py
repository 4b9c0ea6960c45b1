"""What opening a topic reads and writes of the metadata store, done where it cannot stall
the event loop.

On a cluster's broker the store is ZooKeeper: a cache miss or a write waits for the
ensemble (up to ``metadataStoreOperationTimeoutSeconds``), and a topic's first load misses
the cache for nearly everything it reads. So a load makes its store calls as two functions
of the store, run where :func:`~magnetar.storage.metadata_calls.metadata_call` runs them
(the metadata writer's thread on ZooKeeper, in place on the standalone broker's SQLite):

- before the ledger is opened, the topic's record is checked (a partition's record, or an
  auto-created topic's, is written then);
- once it is open, the topic's stored state is gathered into a :class:`StoredTopic`: its
  stored properties (the creation time recorded on its first load), its cursors (the
  deduplication snapshot's and the shared delayed index's record among them), the snapshot
  of its property-deduplication window; and its policies and its namespace's, and the
  registry entries of the delayed-delivery bucket snapshots its cursors name, read so
  that the store's watched cache holds them when the loop resolves the policies and
  recovers the buckets.

The event loop then builds the topic from that state without a store call. A policy
written in between drops its entry from the cache, and the loop reads the new one, as it
does after any policy change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.property_dedup import SNAPSHOT_PREFIX
from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR
from magnetar.core.delayed.bucket import is_bucket_key
from magnetar.core.delayed.delayed_delivery import SHARED_INDEX_CURSOR
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics import topic_properties
from magnetar.core.topics.topic_records import TopicRecords
from magnetar.server.clock import now_ms
from magnetar.storage.ledger_bucket_snapshot_storage import REGISTRY_PREFIX
from magnetar.storage.metadata_calls import StoreHolder, metadata_call


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic's state in the metadata store, as its load found it."""

    #: the topic's stored properties (creation time recorded), None without a record
    properties: dict[str, Any] | None
    #: every cursor stored for the topic, by name
    cursors: Mapping[str, CursorRecord]
    #: the stored snapshot of its property-deduplication window, None when there is none
    property_dedup: Any

    @property
    def dedup_snapshot(self) -> CursorRecord | None:
        return self.cursors.get(DEDUP_CURSOR)

    @property
    def shared_index(self) -> CursorRecord | None:
        return self.cursors.get(SHARED_INDEX_CURSOR)


async def check_record(holder: StoreHolder, config: BrokerConfig, name: TopicName, create: bool) -> None:
    """:meth:`TopicRecords.check_record` through :func:`metadata_call`, with rules over the
    store it is given (``TopicNotFound`` and ``NotAllowed`` reach the caller)."""
    await metadata_call(holder, partial(_check_record, config=config, name=name, create=create))


async def stored_topic(holder: StoreHolder, name: TopicName) -> StoredTopic:
    """The topic's :class:`StoredTopic`, through :func:`metadata_call`."""
    return await metadata_call(holder, partial(read_stored_topic, name=name, now=now_ms()))


def read_stored_topic(store: BrokerMetadataStore, name: TopicName, now: int) -> StoredTopic:
    """Gather the topic's stored state; a stored topic without a creation time gets ``now``."""
    key = str(name)
    properties = store.get_topic(key)
    stamped = topic_properties.recorded_creation(properties, now)
    if stamped is not None:
        store.update_topic_properties(key, stamped)
        properties = stamped
    cursors = store.list_cursors(key)
    window = store.get_json(SNAPSHOT_PREFIX + key)
    store.get_namespace_policies(name.namespace_name)
    store.get_topic_policies(str(name.partitioned_topic))
    for bucket_id in _buckets_named(cursors.values()):
        store.get_json(f"{REGISTRY_PREFIX}{bucket_id}")
    return StoredTopic(properties, cursors, window)


def _buckets_named(records: Iterable[CursorRecord]) -> set[int]:
    """The bucket snapshots the cursors' properties name (a bad value is the recovery's to report)."""
    return {int(value) for record in records for key, value in record.properties.items()
            if is_bucket_key(key) and str(value).isdigit()}


def _check_record(store: BrokerMetadataStore, config: BrokerConfig, name: TopicName, create: bool) -> None:
    TopicRecords(store, PolicyCache(store, config), config, {}).check_record(name, create)
