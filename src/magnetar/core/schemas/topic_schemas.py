"""A topic's schema decisions with their policies: which version a producer's schema is,
whether a consumer's schema is added or checked, and Pulsar's soft and forced deletes.

The rules are :mod:`.versions`'; this is where they meet the policies in force (the
compatibility strategy: topic, namespace, broker) and the registry's history, for the
binary protocol and the admin REST alike.
"""

from __future__ import annotations

import struct
from typing import Protocol

from magnetar.core import policies
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.schemas import versions
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy, SchemaData
from magnetar.core.schemas.versions import StoredVersion
from magnetar.core.topics.topic import Topic


def encode_version(version: int) -> bytes:
    """A version on the wire: 8 bytes, big-endian (Pulsar's ``LongSchemaVersion``)."""
    return struct.pack(">q", version)


def decode_version(raw: bytes) -> int:
    if len(raw) != 8:
        raise ValueError("schema version must be 8 bytes (big-endian int64)")
    return int(struct.unpack(">q", raw)[0])


class SchemaHistory(Protocol):
    """The registry: every stored version of a topic's schemas, and appending one."""

    def history(self, name: TopicName) -> list[StoredVersion]: ...

    def append(self, name: TopicName, schema: SchemaData, now_ms: int, *, deleted: bool = False) -> StoredVersion: ...

    def delete_all(self, name: TopicName) -> None: ...


class TopicSchemas:
    def __init__(self, registry: SchemaHistory, policies: PolicyCache, config: BrokerConfig) -> None:
        self._registry = registry
        self._policies = policies
        self._config = config

    def strategy(self, name: TopicName) -> SchemaCompatibilityStrategy:
        """The compatibility strategy that applies to the topic (topic, namespace, broker)."""
        found = policies.schema_compatibility_strategy(self._policies.topic_policies(name),
                                                       self._policies.policies_of(name), self._config)
        return SchemaCompatibilityStrategy(found)

    def add(self, name: TopicName, schema: SchemaData, now_ms: int) -> int:
        """The version of ``schema`` on the topic, stored as the next one if it is new and
        may be added (Pulsar's ``AbstractTopic.addSchema``); raises IncompatibleSchema."""
        history = self._registry.history(name)
        found = versions.version_to_add(
            history, schema, self.strategy(name),
            policies.allow_auto_update_schema(self._policies.policies_of(name), self._config))
        if found is not None:
            return found
        return self._registry.append(name, schema, now_ms).version

    def producer_version(self, topic: Topic, schema: SchemaData | None, now_ms: int) -> bytes | None:
        """A new producer's schema version, or None when it sends none (then refused if
        schema validation is enforced and the topic has a schema)."""
        if schema is None:
            versions.check_producer_without_schema(
                self._registry.history(topic.name),
                policies.schema_validation_enforced(self._policies.policies_of(topic.name), self._config))
            return None
        return encode_version(self.add(topic.name, schema, now_ms))

    def check_consumer(self, topic: Topic, schema: SchemaData, now_ms: int) -> None:
        """A subscribing consumer's schema: added to an idle topic without one, else
        checked for compatibility (Pulsar's ``addSchemaIfIdleOrCheckCompatible``)."""
        if schema.schema_type == "AUTO_CONSUME":
            return
        in_use = bool(topic.producers) or topic.ledger.total_size_bytes() > 0 or any(
            consumer.schema_type != "AUTO_CONSUME" for sub in topic.subscriptions.values()
            for consumer in sub.consumers)
        history = self._registry.history(topic.name)
        if versions.consumer_adds_schema(history, schema, self.strategy(topic.name), in_use):
            self.add(topic.name, schema, now_ms)

    def delete(self, name: TopicName, force: bool, now_ms: int) -> int | None:
        """Pulsar's schema delete: a marker version (soft), or every version gone (force).
        Returns the marker's version, None when forced or when there was nothing to delete."""
        history = self._registry.history(name)
        if force:
            self._registry.delete_all(name)
            return None
        if versions.latest(history) is None:
            return None
        return self._registry.append(name, SchemaData("NONE", b""), now_ms, deleted=True).version
