"""Whether a schema's definition is one of its type before it is stored (Pulsar's
``SchemaDataValidator``s): AVRO, JSON and PROTOBUF need an Avro definition (JSON may also
be the old JSON-Schema format), primitives no definition at all (STRING may say 'null', as
the Python client does), KEY_VALUE two valid
sides, PROTOBUF_NATIVE a descriptor naming its root message."""

from __future__ import annotations

from magnetar.core.errors import InvalidSchemaData
from magnetar.core.schemas.avro_resolution import InvalidAvroSchema, parse
from magnetar.core.schemas.schema_data import SchemaData, json_object, key_value_parts


def validate(schema: SchemaData) -> None:
    """Raise :class:`InvalidSchemaData` with the reason when the definition is unusable."""
    kind = schema.schema_type
    if kind == "NONE":
        return  # raw bytes: nothing to check
    if kind == "STRING":
        if schema.data not in (b"", b"null"):  # the Python client sends 'null'
            raise InvalidSchemaData(f"Invalid schema definition data for string schema : "
                                    f"'{schema.data.decode(errors='replace')}'")
    elif kind in ("AUTO_CONSUME", "EXTERNAL"):
        raise InvalidSchemaData(f"Schema {kind} is a client-side schema type")
    elif schema.is_primitive:
        if schema.data:
            raise InvalidSchemaData(f"Invalid schema definition data for primitive schemas : length of schema "
                                    f"data should be zero, but {len(schema.data)} bytes is found")
    elif kind in ("AVRO", "JSON", "PROTOBUF"):
        _validate_struct(schema)
    elif kind == "KEY_VALUE":
        key, value = key_value_parts(schema)
        validate(key)
        validate(value)
    elif kind == "PROTOBUF_NATIVE":
        _validate_protobuf_native(schema)


def _validate_struct(schema: SchemaData) -> None:
    try:
        parse(schema.data)
    except InvalidAvroSchema as exc:
        if schema.schema_type == "JSON" and json_object(schema.data) is not None:
            return  # the old JSON-Schema format
        raise InvalidSchemaData(f"Invalid schema definition data for {schema.schema_type} schema: {exc}") from None


def _validate_protobuf_native(schema: SchemaData) -> None:
    loaded = json_object(schema.data)
    if loaded is None or not isinstance(loaded.get("rootMessageTypeName"), str) \
            or not isinstance(loaded.get("fileDescriptorSet"), str):
        raise InvalidSchemaData("Invalid schema definition data for PROTOBUF_NATIVE schema: expected JSON with "
                                "fileDescriptorSet and rootMessageTypeName")
