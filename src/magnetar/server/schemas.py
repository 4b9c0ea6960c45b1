"""The schema registry's storage side: versions per topic in the metadata store, an
8-byte big-endian version id on the wire (Pulsar's ``LongSchemaVersion``).

Partitions share their partitioned topic's schemas, and a persistent and a
non-persistent topic of one name share theirs (Pulsar's schema id is the partitioned
topic's ``tenant/namespace/topic``). Which version a schema gets, and whether it may be added,
is decided in :mod:`magnetar.core.schemas.versions`; this module reads and appends.
"""

from __future__ import annotations

import struct

from magnetar.core.names import TopicName
from magnetar.core.schemas.schema_data import SCHEMA_TYPE_NAMES, SCHEMA_TYPE_NUMBERS, SchemaData
from magnetar.core.schemas.versions import StoredVersion
from magnetar.storage.metadata_store import MetadataStore, SchemaRecord
from magnetar.wire import pulsar_api_pb2 as pb


def encode_version(version: int) -> bytes:
    return struct.pack(">q", version)


def decode_version(raw: bytes) -> int:
    if len(raw) != 8:
        raise ValueError("schema version must be 8 bytes (big-endian int64)")
    return int(struct.unpack(">q", raw)[0])


def schema_id(name: TopicName) -> str:
    """The key a topic's schemas are stored under: its partitioned topic's name in the
    persistent domain, since Pulsar's schema id (``tenant/namespace/topic``) has no domain."""
    parent = name.partitioned_topic
    return f"persistent://{parent.tenant}/{parent.namespace}/{parent.local_name}"


class SchemaRegistry:
    """Schema versions per topic, kept in the metadata store so they outlive a restart.

    A version number names one schema for good: messages carry it, and a consumer asks
    for it later, so numbering must never start again from 0 after a restart.
    """

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._cache: dict[str, list[StoredVersion]] = {}

    def history(self, name: TopicName) -> list[StoredVersion]:
        """Every stored version of the topic's schemas, delete markers included, oldest first."""
        key = schema_id(name)
        cached = self._cache.get(key)
        if cached is None:
            cached = [StoredVersion(number, SchemaData(r.schema_type, r.data, dict(r.properties)), r.timestamp_ms,
                                    r.deleted)
                      for number, r in enumerate(self._store.get_schemas(key))]
            self._cache[key] = cached
        return cached

    def append(self, name: TopicName, schema: SchemaData, now_ms: int, *, deleted: bool = False) -> StoredVersion:
        """Store ``schema`` (or a delete marker) as the next version."""
        record = SchemaRecord(schema.schema_type, schema.data, dict(schema.properties), now_ms, deleted)
        number = self._store.add_schema(schema_id(name), record)
        stored = StoredVersion(number, schema, now_ms, deleted)
        self.history(name).append(stored)
        return stored

    def delete_all(self, name: TopicName) -> int:
        """Remove every version for good (Pulsar's forced delete); returns how many."""
        key = schema_id(name)
        self._cache.pop(key, None)
        return self._store.delete_schemas(key)

    def forget(self, name: TopicName) -> None:
        """Drop the cached versions (the store was changed by someone else)."""
        self._cache.pop(schema_id(name), None)


def schema_from_wire(schema: pb.Schema) -> SchemaData:
    return SchemaData(SCHEMA_TYPE_NAMES.get(int(schema.type), "NONE"), bytes(schema.schema_data),
                      {kv.key: kv.value for kv in schema.properties})


def schema_to_wire(name: TopicName, schema: SchemaData) -> pb.Schema:
    """Pulsar names the schema by its id, ``tenant/namespace/topic``."""
    parent = name.partitioned_topic
    return pb.Schema(name=f"{parent.namespace_name}/{parent.local_name}", schema_data=schema.data,
                     type=SCHEMA_TYPE_NUMBERS.get(schema.schema_type, 0),  # type: ignore[arg-type]
                     properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(schema.properties.items())])
