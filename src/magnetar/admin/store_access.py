"""The admin API's metadata store calls, made where they cannot stall the event loop.

A ZooKeeper store serves reads from a cache its watches keep current, but a cache miss and
every write wait for the ensemble's answer (up to ``metadataStoreOperationTimeoutSeconds``):
made on the event loop, one slow answer would stall every connection of the broker. So on a
cluster's broker each admin handler hands its store calls, as one function of the store, to
the metadata writer's thread, in order with the broker's other metadata writes (cursors,
schemas, topic deletes), and awaits the result; what the function raises (a ``RestError``
with Pulsar's status and reason) reaches the handler unchanged.

The standalone broker's SQLite store answers at once and its commits are local (the answer
waits for the writer's sync, :mod:`~magnetar.admin.durable_answers`); there the function
runs in place, on the loop's connection, whose writes the broker's caches count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from magnetar.admin.admin_broker import AdminBroker
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.topics.topic_records import TopicRecords
from magnetar.storage.metadata_calls import metadata_call, shared_store

T = TypeVar("T")


async def in_store(broker: AdminBroker, call: Callable[[BrokerMetadataStore], T]) -> T:
    """``call(store)``: off the event loop when the store is shared (ZooKeeper), in place on
    the standalone broker's SQLite store (:func:`~magnetar.storage.metadata_calls.metadata_call`)."""
    return await metadata_call(broker, call)


@dataclass(frozen=True, slots=True)
class StoreRules:
    """The store and core's rules that read it, for a call of :func:`in_rules`."""

    store: BrokerMetadataStore
    policies: PolicyCache
    records: TopicRecords
    access: AccessRules


async def in_rules(broker: AdminBroker, call: Callable[[StoreRules], T]) -> T:
    """``call(rules)`` as :func:`in_store`, with core's policy cache, topic record and access
    rules over the store it is given. Off the loop they are fresh ones (what they read they
    read there) and see the topics loaded when the call was made."""
    if not shared_store(broker):
        return call(StoreRules(broker.metadata, broker.policies, broker.records, broker.access))
    loaded = dict(broker.topics)
    config = broker.config

    def with_rules(store: BrokerMetadataStore) -> T:
        policies = PolicyCache(store, config)
        return call(StoreRules(store, policies, TopicRecords(store, policies, config, loaded),
                               AccessRules(store, policies, config)))
    return await in_store(broker, with_rules)
