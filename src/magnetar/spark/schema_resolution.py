"""Which schema a query reads or writes with, asked of the schema REST API on the driver.

A read takes the *latest* schema of its topics when the query starts (pulsar-spark's
rule): every topic read must have the same one, or none. Executors look up older
versions, by number, for the messages written with them (:class:`TopicVersions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from magnetar.spark.options import MagnetarOptionError, SinkOptions, SourceOptions, TopicSelection
from magnetar.spark.record_decoding import SchemaVersions, TypedColumns
from magnetar.spark.rest import AdminClient, MagnetarAdminError, base_topic
from magnetar.spark.schema_mapping import RECORD_TYPES, TopicSchema

#: the topic partitions a query reads (``planning.resolve_partitions``, passed in: planning
#: builds on the reading side that this module serves)
PartitionsOf = Callable[[AdminClient, TopicSelection], list[str]]


def with_read_schema(options: SourceOptions, partitions_of: PartitionsOf) -> SourceOptions:
    """``options`` with the schema its topics' messages are decoded with."""
    with AdminClient(options.connection) as admin:
        topics = sorted({base_topic(tp) for tp in partitions_of(admin, options.selection)})
        found = {topic: admin.topic_schema(topic) for topic in topics}
    schemas = {_identity(s): (topic, s) for topic, s in found.items()}
    if len(schemas) > 1:
        described = ", ".join(f"{topic}: {s.schema_type if s else 'no schema'}" for topic, s in schemas.values())
        raise MagnetarOptionError(f"the topics read have different schemas ({described}); read topics that "
                                  "share one schema (or none) in one query")
    schema = next(iter(schemas.values()))[1] if schemas else None
    return replace(options, topic_schema=schema if schema is not None and schema.is_typed else None)


def with_write_schema(options: SinkOptions) -> SinkOptions:
    """``options`` with the topic's AVRO or JSON schema, which rows are then encoded with.

    Without an admin URL (allowed with ``requireDeduplication=false``) the schema is not
    looked up and ``value`` is written as it is."""
    if options.topic is None or options.connection.admin_url is None:
        return options
    with AdminClient(options.connection) as admin:
        schema = admin.topic_schema(options.topic)
    if schema is None or schema.schema_type not in RECORD_TYPES:
        return options
    return replace(options, topic_schema=schema)


def typed_columns(options: SourceOptions, topic: str) -> TypedColumns | None:
    """The decoder of ``topic``'s messages into the query's columns; None for binary ``value``."""
    if options.topic_schema is None:
        return None
    return TypedColumns(SchemaVersions(options.topic_schema, TopicVersions(options, topic)))


class TopicVersions:
    """Fetches the versions of one topic's schema by number, each once per task."""

    def __init__(self, options: SourceOptions, topic: str) -> None:
        self.options = options
        self.topic = topic

    def __call__(self, version: int) -> TopicSchema:
        with AdminClient(self.options.connection) as admin:
            found = admin.topic_schema(self.topic, version)
        if found is None:
            raise MagnetarAdminError(f"{self.topic} has messages of schema version {version}, which the "
                                     "broker no longer has (was the schema deleted?)", 404)
        return found


def _identity(schema: TopicSchema | None) -> tuple[str, str, tuple[tuple[str, str], ...]] | None:
    if schema is None:
        return None
    return schema.schema_type, schema.definition, tuple(sorted(schema.properties.items()))
