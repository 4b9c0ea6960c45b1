"""One version of a topic's schema as the registry compares it (Pulsar's ``SchemaData``),
the schema types by their wire numbers, and the compatibility strategies.

A KEY_VALUE schema's data holds its key and value schemas, each preceded by its
length as a big-endian int32 (Pulsar's ``KeyValue.encode``); their types and
properties are in the schema's properties under ``key.schema.*`` / ``value.schema.*``
(``KeyValueSchemaInfo``). :func:`key_value_parts` splits it so each side can be
compared by the rules of its own type.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from enum import StrEnum

from magnetar.core.errors import InvalidSchemaData
from magnetar.core.names import TopicName

#: Pulsar's ``SchemaType`` names by wire ``Schema.Type`` number.
SCHEMA_TYPE_NAMES: dict[int, str] = {
    0: "NONE", 1: "STRING", 2: "JSON", 3: "PROTOBUF", 4: "AVRO", 5: "BOOLEAN", 6: "INT8", 7: "INT16",
    8: "INT32", 9: "INT64", 10: "FLOAT", 11: "DOUBLE", 12: "DATE", 13: "TIME", 14: "TIMESTAMP",
    15: "KEY_VALUE", 16: "INSTANT", 17: "LOCAL_DATE", 18: "LOCAL_TIME", 19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE", 21: "AUTO_CONSUME", 22: "EXTERNAL",
}
SCHEMA_TYPE_NUMBERS: dict[str, int] = {name: number for number, name in SCHEMA_TYPE_NAMES.items()}
#: the REST API also accepts the byte-array type Pulsar's admin names BYTES
REST_TYPE_ALIASES = {"BYTES": "NONE"}
#: types whose data is an Avro schema definition (Pulsar's ``isUsingAvroSchemaParser``)
AVRO_BASED_TYPES = frozenset({"AVRO", "JSON", "PROTOBUF"})
#: the types Pulsar calls primitive: no definition, only the type matters
PRIMITIVE_TYPES = frozenset({"NONE", "STRING", "BOOLEAN", "INT8", "INT16", "INT32", "INT64", "FLOAT", "DOUBLE",
                             "DATE", "TIME", "TIMESTAMP", "INSTANT", "LOCAL_DATE", "LOCAL_TIME",
                             "LOCAL_DATE_TIME"})

class SchemaCompatibilityStrategy(StrEnum):
    """Pulsar's ``SchemaCompatibilityStrategy``; UNDEFINED defers to the next level."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")


@dataclass(frozen=True)
class SchemaData:
    """A schema as clients send it: Pulsar's type name, its definition, its properties."""

    schema_type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def is_primitive(self) -> bool:
        return self.schema_type in PRIMITIVE_TYPES

    def same_definition(self, other: SchemaData) -> bool:
        """Same bytes; for KEY_VALUE also the same properties, which hold the two sides' types."""
        if self.data != other.data:
            return False
        return self.schema_type != "KEY_VALUE" or self.properties == other.properties


def key_value_parts(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas a KEY_VALUE schema holds."""
    key_data, value_data = _split_lengths(schema.data)
    props = schema.properties
    return (SchemaData(props.get("key.schema.type", "NONE"), key_data),
            SchemaData(props.get("value.schema.type", "NONE"), value_data))


def _split_lengths(data: bytes) -> tuple[bytes, bytes]:
    parts: list[bytes] = []
    offset = 0
    for _ in range(2):
        if len(data) < offset + 4:
            raise InvalidSchemaData("Invalid KEY_VALUE schema data: missing the length of its key or value schema")
        (length,) = struct.unpack_from(">i", data, offset)
        offset += 4
        length = max(length, 0)  # -1 stands for no schema
        if len(data) < offset + length:
            raise InvalidSchemaData("Invalid KEY_VALUE schema data: a length runs past its end")
        parts.append(data[offset:offset + length])
        offset += length
    return parts[0], parts[1]


def encode_key_value(key: bytes, value: bytes) -> bytes:
    """Pulsar's ``KeyValue.encode`` of two schema definitions."""
    return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value


def json_object(data: bytes) -> dict[str, object] | None:
    """The JSON object ``data`` holds, None when it holds anything else."""
    try:
        loaded = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return loaded if isinstance(loaded, dict) else None


def schema_id(name: TopicName) -> str:
    """The key a topic's schemas are stored under: its partitioned topic's name in the
    persistent domain, since Pulsar's schema id (``tenant/namespace/topic``) has no domain."""
    parent = name.partitioned_topic
    return f"persistent://{parent.tenant}/{parent.namespace}/{parent.local_name}"
