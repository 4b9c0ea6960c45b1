"""What the registry decides about a topic's schema versions, with no storage in sight:
Pulsar's ``SchemaRegistryServiceImpl.putSchemaIfAbsent``, ``trimDeletedSchemaAndGetList``
and ``getSchemaVersionBySchemaData``, and the topic's ``addSchema`` /
``addSchemaIfIdleOrCheckCompatible`` rules for producers and consumers.

A soft delete stores a marker version; the versions before the last marker are gone for
every purpose but their numbers, which are never reused while the history is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.core.errors import IncompatibleSchema
from magnetar.core.schemas.avro_resolution import AvroSchema, InvalidAvroSchema, parse, same_schema
from magnetar.core.schemas.compatibility import check_compatible, check_consumer_compatible
from magnetar.core.schemas.schema_data import AVRO_BASED_TYPES, SchemaData
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy as Strategy
from magnetar.core.schemas.validation import validate


@dataclass(frozen=True)
class StoredVersion:
    version: int
    schema: SchemaData
    timestamp_ms: int = 0
    deleted: bool = False


def live_versions(history: Sequence[StoredVersion]) -> list[StoredVersion]:
    """The versions after the last delete marker (none when the latest is a delete)."""
    for index in range(len(history) - 1, -1, -1):
        if history[index].deleted:
            return list(history[index + 1:])
    return list(history)


def latest(history: Sequence[StoredVersion]) -> StoredVersion | None:
    """The topic's current schema; None without one or after a delete."""
    return history[-1] if history and not history[-1].deleted else None


def version_of(history: Sequence[StoredVersion], version: int) -> StoredVersion | None:
    """A live version by number (a deleted or trimmed one is not found, as in Pulsar)."""
    return next((v for v in live_versions(history) if v.version == version), None)


def find_version(history: Sequence[StoredVersion], schema: SchemaData) -> int | None:
    """The live version holding this same schema: same type and, for Avro-based types,
    the same parsed definition (however it is spelled), else the same definition."""
    candidates = [v for v in live_versions(history) if v.schema.schema_type == schema.schema_type]
    wanted = _parsed(schema) if schema.schema_type in AVRO_BASED_TYPES else None
    for stored in candidates:
        if stored.schema.same_definition(schema):
            return stored.version
        known = _parsed(stored.schema) if wanted is not None else None
        if wanted is not None and known is not None and same_schema(known, wanted):
            return stored.version
    return None


def _parsed(schema: SchemaData) -> AvroSchema | None:
    try:
        return parse(schema.data)
    except InvalidAvroSchema:
        return None


def version_to_add(history: Sequence[StoredVersion], schema: SchemaData, strategy: Strategy,
                   allow_auto_update: bool) -> int | None:
    """The existing version of ``schema``, or None when it is to be stored as the next
    version; raises :class:`IncompatibleSchema` when it may not be added."""
    validate(schema)
    existing = find_version(history, schema)
    if existing is not None:
        return existing
    if not allow_auto_update:
        raise IncompatibleSchema("Schema not found and schema auto updating is disabled.")
    check_compatible([v.schema for v in live_versions(history)], schema, strategy)
    return None


def check_compatibility(history: Sequence[StoredVersion], schema: SchemaData, strategy: Strategy) -> None:
    """The admin API's compatibility test (Pulsar's ``isCompatible``)."""
    validate(schema)
    check_compatible([v.schema for v in live_versions(history)], schema, strategy)


def consumer_adds_schema(history: Sequence[StoredVersion], schema: SchemaData, strategy: Strategy,
                         topic_in_use: bool) -> bool:
    """Whether a subscribing consumer's schema is to be added (an idle topic without a
    schema takes it); otherwise it must be compatible, or :class:`IncompatibleSchema`.

    ``topic_in_use``: producers, consumers that are not AUTO_CONSUME, or stored entries.
    """
    validate(schema)
    current = latest(history)
    if current is None and not topic_in_use:
        return True
    if strategy == Strategy.ALWAYS_COMPATIBLE:
        return False
    if current is None:
        raise IncompatibleSchema("Failed to add schema to an active topic with empty(BYTES) schema: "
                                 f"new schema type {schema.schema_type}")
    check_consumer_compatible([v.schema for v in live_versions(history)], schema, strategy)
    return False


def check_producer_without_schema(history: Sequence[StoredVersion], validation_enforced: bool) -> None:
    """Pulsar's ``isSchemaValidationEnforced``: a producer sending no schema is refused
    on a topic that has one."""
    if validation_enforced and latest(history) is not None:
        raise IncompatibleSchema("Producers cannot connect or send message without a schema to topics with a schema")
