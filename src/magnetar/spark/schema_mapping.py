"""A topic's Pulsar schema as Spark columns, the way streamnative/pulsar-spark maps it.

* AVRO and JSON (whose definition is an Avro schema): a record becomes one column per
  field; nested records are structs, arrays arrays, maps maps with string keys, enums
  strings, fixed binary; ``[null, T]`` unions are a nullable ``T``, ``[int, long]``
  long and ``[float, double]`` double. Logical types: ``date`` a date,
  ``timestamp-millis``/``timestamp-micros`` a timestamp, ``local-timestamp-*`` a
  timestamp without time zone, ``decimal`` a decimal; ``time-*`` and ``uuid`` keep
  their base type (int/long, string). A schema that is not a record gives one ``value``.
* Primitive schemas give a typed ``value`` (:data:`PRIMITIVE_TYPES`).
* KEY_VALUE gives ``key`` and ``value``, each mapped as above (a record as a struct).
* Anything else (PROTOBUF, PROTOBUF_NATIVE) and a topic without a schema keep the binary ``value``.

Two Arrow types come out of a mapping: Spark's (what the reader hands over) and the
*storage* type (what the decoded values are before logical types apply: a
``timestamp-millis`` is an int64 of milliseconds), so the decoders convert whole
columns with one Arrow cast instead of one Python object per value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from magnetar.spark.option_error import MagnetarOptionError

if TYPE_CHECKING:
    import pyarrow as pa

#: Pulsar's primitive schema types and the Spark type of their ``value`` column.
PRIMITIVE_TYPES: dict[str, DataType] = {
    "NONE": BinaryType(), "BYTES": BinaryType(), "STRING": StringType(), "BOOLEAN": BooleanType(),
    "INT8": ByteType(), "INT16": ShortType(), "INT32": IntegerType(), "INT64": LongType(),
    "FLOAT": FloatType(), "DOUBLE": DoubleType(), "DATE": DateType(), "TIME": LongType(),
    "TIMESTAMP": TimestampType(), "INSTANT": TimestampType(), "LOCAL_DATE": DateType(),
    "LOCAL_TIME": LongType(), "LOCAL_DATE_TIME": TimestampNTZType(),
}
#: Schema types whose definition is an Avro schema this module maps.
RECORD_TYPES = frozenset({"AVRO", "JSON"})
KEY_VALUE = "KEY_VALUE"
#: Spark's decimals hold at most this many digits.
MAX_DECIMAL_PRECISION = 38
_AVRO_PRIMITIVES: dict[str, DataType] = {
    "null": StringType(), "boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
    "float": FloatType(), "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
}
_TIMESTAMPS = {"timestamp-millis": TimestampType(), "timestamp-micros": TimestampType(),
               "local-timestamp-millis": TimestampNTZType(), "local-timestamp-micros": TimestampNTZType()}


class SchemaMappingError(MagnetarOptionError):
    """A topic schema the data source cannot turn into Spark columns; the message says which part."""


@dataclass(frozen=True)
class TopicSchema:
    """One version of a topic's schema as the admin REST API gives it (``GetSchemaResponse``)."""

    schema_type: str
    definition: str
    properties: Mapping[str, str] = field(default_factory=dict)
    version: int = -1

    @classmethod
    def from_rest(cls, doc: Mapping[str, Any]) -> TopicSchema:
        kind = str(doc.get("type", "NONE"))
        return cls("NONE" if kind == "BYTES" else kind, str(doc.get("data", "")),
                   {str(k): str(v) for k, v in (doc.get("properties") or {}).items()}, int(doc.get("version", -1)))

    @property
    def is_typed(self) -> bool:
        """Whether reads give typed columns (the binary ``value`` otherwise)."""
        if self.schema_type == KEY_VALUE:
            return True
        return self.schema_type in RECORD_TYPES or (self.schema_type in PRIMITIVE_TYPES and
                                                    self.schema_type not in ("NONE", "BYTES"))

    def avro(self) -> Any:
        """The Avro definition of an AVRO or JSON schema, parsed."""
        try:
            return json.loads(self.definition)
        except json.JSONDecodeError as exc:
            raise SchemaMappingError(f"the {self.schema_type} schema is not a JSON Avro definition: {exc}") from None

    def key_value_parts(self) -> tuple[TopicSchema, TopicSchema]:
        """The key and value schemas of a KEY_VALUE schema (the REST form: JSON ``{"key", "value"}``)."""
        doc = json.loads(self.definition)
        parts = []
        for side in ("key", "value"):
            part = doc[side]
            kind = self.properties.get(f"{side}.schema.type", "NONE")
            parts.append(TopicSchema("NONE" if kind == "BYTES" else kind,
                                     part if isinstance(part, str) else json.dumps(part), {}, self.version))
        return parts[0], parts[1]

    @property
    def key_value_encoding(self) -> str:
        """``INLINE`` (key and value in the payload) or ``SEPARATED`` (the key as the message key)."""
        return self.properties.get("kv.encoding.type", "INLINE").upper()


def data_fields(schema: TopicSchema) -> list[StructField]:
    """The columns a topic's messages become, before the ``__`` metadata columns."""
    if schema.schema_type == KEY_VALUE:
        key, value = schema.key_value_parts()
        return [StructField("key", value_type(key), True), StructField("value", value_type(value), True)]
    if schema.schema_type in RECORD_TYPES:
        mapped = avro_to_spark(schema.avro())
        if isinstance(mapped, StructType):
            return [StructField(f.name, f.dataType, True) for f in mapped.fields]
    return [StructField("value", value_type(schema), True)]


def value_type(schema: TopicSchema) -> DataType:
    """The Spark type of one whole value of ``schema`` (a record as a struct)."""
    if schema.schema_type in RECORD_TYPES:
        return avro_to_spark(schema.avro())
    if schema.schema_type in PRIMITIVE_TYPES:
        return PRIMITIVE_TYPES[schema.schema_type]
    if schema.schema_type == KEY_VALUE:
        raise SchemaMappingError("a KEY_VALUE schema inside a KEY_VALUE schema is not supported")
    return BinaryType()


def avro_to_spark(avro: Any, named: dict[str, DataType] | None = None, namespace: str = "") -> DataType:
    """The Spark type of an Avro schema (the rules in the module docstring)."""
    named = {} if named is None else named
    if isinstance(avro, list):
        return _union(avro, named, namespace)
    if isinstance(avro, str):
        if avro in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[avro]
        found = named.get(avro) or named.get(f"{namespace}.{avro}")
        if found is None:
            raise SchemaMappingError(f"the Avro schema refers to {avro!r}, which is not defined before it "
                                     "(recursive records are not supported)")
        return found
    if not isinstance(avro, dict) or "type" not in avro:
        raise SchemaMappingError(f"not an Avro schema: {avro!r}")
    kind, logical = avro["type"], avro.get("logicalType")
    if logical == "date" and kind == "int":
        return DateType()
    if logical in _TIMESTAMPS and kind == "long":
        return _TIMESTAMPS[logical]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _decimal(avro)
    if kind == "record":
        return _record(avro, named, namespace)
    if kind == "enum":
        _define(avro, StringType(), named, namespace)
        return StringType()
    if kind == "fixed":
        _define(avro, BinaryType(), named, namespace)
        return BinaryType()
    if kind == "array":
        return ArrayType(avro_to_spark(avro["items"], named, namespace), True)
    if kind == "map":
        return MapType(StringType(), avro_to_spark(avro["values"], named, namespace), True)
    return avro_to_spark(kind, named, namespace)


def _record(avro: dict[str, Any], named: dict[str, DataType], namespace: str) -> StructType:
    inner = avro.get("namespace", namespace) or ""
    fields = [StructField(f["name"], avro_to_spark(f["type"], named, inner), True) for f in avro.get("fields", [])]
    struct = StructType(fields)
    _define(avro, struct, named, namespace)
    return struct


def _define(avro: dict[str, Any], mapped: DataType, named: dict[str, DataType], namespace: str) -> None:
    name = str(avro.get("name", ""))
    space = avro.get("namespace", namespace) or ""
    named[name] = mapped
    if space and "." not in name:
        named[f"{space}.{name}"] = mapped


def _union(branches: list[Any], named: dict[str, DataType], namespace: str) -> DataType:
    kinds = [b for b in branches if b != "null"]
    if len(kinds) == 1:
        return avro_to_spark(kinds[0], named, namespace)
    if set(kinds) <= {"int", "long"}:
        return LongType()
    if set(kinds) <= {"float", "double"}:
        return DoubleType()
    raise SchemaMappingError(f"Avro union {branches!r} has several non-null branches; only [null, T], "
                             "[int, long] and [float, double] unions map to a Spark column")


def _decimal(avro: dict[str, Any]) -> DecimalType:
    precision, scale = int(avro.get("precision", 0)), int(avro.get("scale", 0))
    if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise SchemaMappingError(f"decimal({precision}, {scale}) does not fit a Spark decimal "
                                 f"(precision 1..{MAX_DECIMAL_PRECISION}, scale 0..precision)")
    return DecimalType(precision, scale)


def storage_avro(avro: Any) -> Any:
    """The Avro schema with logical types taken off, except ``decimal``: what the decoders
    read, so that values come out as ints (cast by Arrow) rather than datetime objects."""
    if isinstance(avro, list):
        return [storage_avro(b) for b in avro]
    if not isinstance(avro, dict):
        return avro
    out = {k: v for k, v in avro.items() if k != "logicalType" or v == "decimal"}
    if "fields" in out:
        out["fields"] = [{**f, "type": storage_avro(f["type"])} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = storage_avro(out[key])
    if isinstance(out.get("type"), dict | list):
        out["type"] = storage_avro(out["type"])
    return out


def storage_arrow_type(spark_type: DataType, avro: Any) -> pa.DataType:
    """The Arrow type the storage values of ``avro`` convert to (see the module docstring)."""
    import pyarrow as pa
    if isinstance(avro, list):
        kinds = [b for b in avro if b != "null"]
        return storage_arrow_type(spark_type, kinds[0] if len(kinds) == 1 else "long")
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        if logical in _TIMESTAMPS:
            unit = "ms" if logical.endswith("millis") else "us"
            return pa.timestamp(unit, tz="UTC" if not logical.startswith("local") else None)
        if isinstance(spark_type, StructType) and avro.get("type") == "record":
            return pa.struct([pa.field(f.name, storage_arrow_type(f.dataType, a["type"]))
                              for f, a in zip(spark_type.fields, avro["fields"], strict=True)])
        if isinstance(spark_type, ArrayType) and avro.get("type") == "array":
            return pa.list_(storage_arrow_type(spark_type.elementType, avro["items"]))
        if isinstance(spark_type, MapType) and avro.get("type") == "map":
            return pa.map_(pa.string(), storage_arrow_type(spark_type.valueType, avro["values"]))
        if isinstance(avro.get("type"), dict | list):
            return storage_arrow_type(spark_type, avro["type"])
    return spark_arrow_type(spark_type)


def spark_arrow_type(spark_type: DataType) -> pa.DataType:
    """Spark's Arrow type for ``spark_type`` (timestamps in microseconds, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_type
    return to_arrow_type(spark_type, timezone="UTC")


def source_struct(schema: TopicSchema | None, metadata: StructType) -> StructType:
    """The source's row layout: the data columns of ``schema`` (binary ``value`` without one),
    then the metadata columns; a data column named like a metadata column is refused."""
    if schema is None or not schema.is_typed:
        return metadata
    fields = data_fields(schema)
    taken = set(metadata.fieldNames())
    for f in fields:
        if f.name in taken and f.name != "value":
            raise SchemaMappingError(f"the topic schema's field {f.name!r} has the name of a metadata column; "
                                     "rename the field")
    return StructType(fields + [f for f in metadata.fields if f.name != "value"])
