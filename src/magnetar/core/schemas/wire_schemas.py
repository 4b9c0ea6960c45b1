"""Schemas as the binary protocol carries them (``Schema`` in PulsarApi.proto)."""

from __future__ import annotations

from magnetar.core.names import TopicName
from magnetar.core.schemas.schema_data import SCHEMA_TYPE_NAMES, SCHEMA_TYPE_NUMBERS, SchemaData
from magnetar.wire import pulsar_api_pb2 as pb


def schema_from_wire(schema: pb.Schema) -> SchemaData:
    return SchemaData(SCHEMA_TYPE_NAMES.get(int(schema.type), "NONE"), bytes(schema.schema_data),
                      {kv.key: kv.value for kv in schema.properties})


def schema_to_wire(name: TopicName, schema: SchemaData) -> pb.Schema:
    """Pulsar names the schema by its id, ``tenant/namespace/topic``."""
    parent = name.partitioned_topic
    return pb.Schema(name=f"{parent.namespace_name}/{parent.local_name}", schema_data=schema.data,
                     type=SCHEMA_TYPE_NUMBERS.get(schema.schema_type, 0),  # type: ignore[arg-type]
                     properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(schema.properties.items())])
