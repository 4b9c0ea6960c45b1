"""A minimal schema registry: versions per topic, an 8-byte big-endian version id.

Full compatibility checks come later; the same schema gets its existing version,
a different one becomes the next version. Versions live in the metadata store.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from magnetar.storage.metadata_store import MetadataStore, SchemaRecord


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    schema_type: int
    name: str
    data: bytes
    properties: tuple[tuple[str, str], ...]

    @property
    def version_bytes(self) -> bytes:
        return struct.pack(">q", self.version)


def decode_version(raw: bytes) -> int:
    if len(raw) != 8:
        raise ValueError("schema version must be 8 bytes (big-endian int64)")
    return int(struct.unpack(">q", raw)[0])


#: Pulsar's SchemaType names, as the metadata store keeps them, by wire ``Schema.Type``.
PULSAR_TYPE_NAMES = {
    0: "NONE", 1: "STRING", 2: "JSON", 3: "PROTOBUF", 4: "AVRO", 5: "BOOLEAN", 6: "INT8", 7: "INT16",
    8: "INT32", 9: "INT64", 10: "FLOAT", 11: "DOUBLE", 12: "DATE", 13: "TIME", 14: "TIMESTAMP",
    15: "KEY_VALUE", 16: "INSTANT", 17: "LOCAL_DATE", 18: "LOCAL_TIME", 19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE", 21: "AUTO_CONSUME",
}
_WIRE_TYPES = {name: number for number, name in PULSAR_TYPE_NAMES.items()}


class SchemaRegistry:
    """Schema versions per topic, kept in the metadata store so they outlive a restart.

    A version number names one schema for good: messages carry it, and a consumer asks
    for it later, so numbering must never start again from 0 after a restart.
    """

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._cache: dict[str, list[SchemaVersion]] = {}

    def versions(self, topic: str) -> list[SchemaVersion]:
        cached = self._cache.get(topic)
        if cached is None:
            local_name = topic.rsplit("/", 1)[-1]
            cached = [SchemaVersion(number, _WIRE_TYPES.get(record.schema_type, 0), local_name, record.data,
                                    tuple(record.properties.items()))
                      for number, record in enumerate(self._store.get_schemas(topic))]
            self._cache[topic] = cached
        return cached

    def register(self, topic: str, schema_type: int, name: str, data: bytes,
                 properties: tuple[tuple[str, str], ...]) -> SchemaVersion:
        """The version of this schema, stored as the next version if it is new."""
        versions = self.versions(topic)
        for existing in versions:
            if (existing.schema_type, existing.data, existing.properties) == (schema_type, data, properties):
                return existing
        record = SchemaRecord(PULSAR_TYPE_NAMES.get(schema_type, "NONE"), data, dict(properties))
        version = SchemaVersion(self._store.add_schema(topic, record), schema_type, name, data, properties)
        versions.append(version)
        return version

    def forget(self, topic: str) -> None:
        """Drop the cached versions (the topic and its stored schemas were deleted)."""
        self._cache.pop(topic, None)
