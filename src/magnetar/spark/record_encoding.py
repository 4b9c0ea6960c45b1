"""DataFrame rows as AVRO or JSON payloads of the topic's schema, for the sink.

The columns are checked against the schema on the driver, before any task runs, so a
DataFrame that does not match is refused before a single message is sent; the message
names the column. A column per record field (a missing column is allowed for a field
that is nullable or has a default); a field's column may be of its Spark type
(:func:`~magnetar.spark.schema_mapping.avro_to_spark`) or a narrower number type.
Payloads are what the official client's ``AvroSchema`` (the record's Avro binary) and
``JsonSchema`` (a JSON object; timestamps as epoch numbers, dates as epoch days) write.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from magnetar.spark.options import MagnetarOptionError
from magnetar.spark.schema_mapping import TopicSchema, data_fields, storage_arrow_type, storage_avro

if TYPE_CHECKING:
    import pyarrow as pa

#: Column types accepted for a field of another type: a value of each widens without loss.
_WIDENS_TO: dict[type[DataType], tuple[type[DataType], ...]] = {
    LongType: (IntegerType, ShortType, ByteType), IntegerType: (ShortType, ByteType),
    DoubleType: (FloatType, LongType, IntegerType, ShortType, ByteType), FloatType: (IntegerType, ShortType, ByteType),
    BinaryType: (StringType,),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SchemaMismatchError(MagnetarOptionError):
    """A DataFrame whose columns do not match the topic's schema; nothing was sent."""


def check_record_columns(schema: StructType, topic: TopicSchema,
                         metadata: Mapping[str, tuple[type[DataType], ...]]) -> None:
    """Refuse a DataFrame that the topic's schema cannot encode, naming the first column at fault."""
    fields = {f.name: f for f in data_fields(topic)}
    optional = _optional_fields(topic)
    what = f"the topic's {topic.schema_type} schema"
    for column in schema.fields:
        wanted = fields.get(column.name)
        if wanted is None:
            if column.name in metadata and isinstance(column.dataType, metadata[column.name]):
                continue
            raise SchemaMismatchError(f"column '{column.name}' is not a field of {what} (fields: "
                                      f"{', '.join(fields)}); drop it or rename it to a field")
        if not _fits(column.dataType, wanted.dataType):
            raise SchemaMismatchError(f"column '{column.name}' has type {column.dataType.simpleString()}, but "
                                      f"{what} needs {wanted.dataType.simpleString()} for it")
    present = set(schema.fieldNames())
    for name in fields:
        if name not in present and name not in optional:
            raise SchemaMismatchError(f"the DataFrame has no column '{name}', a field of {what} that is not "
                                      "nullable and has no default")


def _fits(actual: DataType, wanted: DataType) -> bool:
    """Whether values of ``actual`` encode as ``wanted`` (nullability aside)."""
    if isinstance(wanted, StructType):
        if not isinstance(actual, StructType):
            return False
        have = {f.name: f.dataType for f in actual.fields}
        return set(have) <= set(wanted.fieldNames()) and \
            all(_fits(have[f.name], f.dataType) for f in wanted.fields if f.name in have)
    if isinstance(wanted, ArrayType):
        return isinstance(actual, ArrayType) and _fits(actual.elementType, wanted.elementType)
    if isinstance(wanted, MapType):
        return isinstance(actual, MapType) and isinstance(actual.keyType, StringType) and \
            _fits(actual.valueType, wanted.valueType)
    return type(actual) is type(wanted) and actual == wanted or \
        isinstance(actual, _WIDENS_TO.get(type(wanted), ()))


def _optional_fields(topic: TopicSchema) -> set[str]:
    avro = topic.avro()
    if not isinstance(avro, dict) or avro.get("type") != "record":
        return {"value"}
    return {f["name"] for f in avro.get("fields", [])
            if "default" in f or (isinstance(f["type"], list) and "null" in f["type"])}


class RecordEncoder:
    """Encodes the data columns of the sink's Arrow batches into the binary ``value`` column."""

    def __init__(self, topic: TopicSchema, column_names: list[str]) -> None:
        import fastavro
        self.kind = topic.schema_type
        avro = topic.avro()
        self.record = isinstance(avro, dict) and avro.get("type") == "record"
        fields = [f for f in data_fields(topic) if f.name in column_names]
        self.fields = [f.name for f in fields]
        # Timestamps and dates leave Arrow as epoch numbers (one cast per column, no datetime
        # objects) and are written with the logical types taken off, the same bytes.
        field_avro = {f["name"]: f["type"] for f in avro["fields"]} if self.record else {"value": avro}
        self._storage = [storage_arrow_type(f.dataType, field_avro[f.name]) for f in fields]
        self._numbers = [_epoch_numbers(t) for t in self._storage]
        self._avro = fastavro.parse_schema(storage_avro(avro)) if self.kind == "AVRO" else None
        self._convert = _converter(avro, _avro_leaf if self.kind == "AVRO" else _json_leaf, {})

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its data columns replaced by a ``value`` column of payloads."""
        import pyarrow as pa
        columns = [batch.column(n).cast(storage, safe=False).cast(numbers)
                   for n, storage, numbers in zip(self.fields, self._storage, self._numbers, strict=True)]
        rows = pa.RecordBatch.from_arrays(columns, names=self.fields).to_pylist()
        if not self.record:
            rows = [r["value"] for r in rows]
        if self._convert is not None:
            rows = [self._convert(r) for r in rows]
        payloads = self._avro_payloads(rows) if self._avro is not None else self._json_payloads(rows)
        kept = [n for n in batch.schema.names if n not in self.fields]
        return pa.RecordBatch.from_arrays([pa.array(payloads, pa.binary())] + [batch.column(n) for n in kept],
                                          names=["value"] + kept)

    def _avro_payloads(self, rows: list[Any]) -> list[bytes]:
        import fastavro
        write, schema = fastavro.schemaless_writer, self._avro
        assert schema is not None
        out: list[bytes] = []
        buffer = io.BytesIO()
        for i, row in enumerate(rows):
            buffer.seek(0)
            buffer.truncate()
            try:
                write(buffer, schema, row)
            except (ValueError, TypeError) as exc:
                raise SchemaMismatchError(f"row {i} of the batch does not fit the topic's AVRO schema: {exc}") \
                    from None
            out.append(buffer.getvalue())
        return out

    def _json_payloads(self, rows: list[Any]) -> list[bytes]:
        dumps = json.dumps
        try:
            return [dumps(row, separators=(",", ":")).encode() for row in rows]
        except (TypeError, ValueError) as exc:
            raise SchemaMismatchError(f"a row does not fit the topic's JSON schema: {exc}") from None


Converter = Callable[[Any], Any]
Leaf = Callable[[Any], "Converter | None"]


def _converter(avro: Any, leaf: Leaf, named: dict[str, Converter | None]) -> Converter | None:
    """What turns a value of ``avro`` as Arrow gives it (maps as lists of pairs) into what the
    encoder takes (maps as dicts, and whatever ``leaf`` says of the other types); None: as is."""
    if isinstance(avro, list):
        inner = [_converter(b, leaf, named) for b in avro if b != "null"]
        found = next((c for c in inner if c is not None), None)
        return None if found is None else (lambda v: None if v is None else found(v))
    if isinstance(avro, str):
        return named[avro] if avro in named else leaf(avro)
    if not isinstance(avro, dict):
        return None
    kind = avro.get("type")
    if kind == "record":
        parts = {f["name"]: _converter(f["type"], leaf, named) for f in avro.get("fields", [])}
        active = {k: c for k, c in parts.items() if c is not None}
        converter = None if not active else (lambda r: None if r is None else {
            k: (active[k](v) if k in active and v is not None else v) for k, v in r.items()})
        named[str(avro.get("name"))] = converter
        return converter
    if kind == "array":
        item = _converter(avro["items"], leaf, named)
        return None if item is None else (lambda xs: None if xs is None else [item(x) for x in xs])
    if kind == "map":
        value = _converter(avro["values"], leaf, named)
        return lambda m: None if m is None else {k: (value(x) if value is not None and x is not None else x)
                                                 for k, x in m}
    if isinstance(kind, dict | list):
        return _converter(kind, leaf, named)
    return leaf(avro)


def _avro_leaf(avro: Any) -> Converter | None:
    return None


def _json_leaf(avro: Any) -> Converter | None:
    """JSON's terms for values Python's json cannot write: epoch numbers, text, floats."""
    logical = avro.get("logicalType") if isinstance(avro, dict) else None
    kind = avro.get("type") if isinstance(avro, dict) else avro
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return lambda v: _epoch_units(v, 1000)
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        return lambda v: _epoch_units(v, 1_000_000)
    if logical == "date":
        return lambda v: (v - date(1970, 1, 1)).days if isinstance(v, date) else v
    if logical == "decimal":
        return lambda v: float(v) if isinstance(v, Decimal) else v
    if kind in ("bytes", "fixed"):
        return _text
    return None


def _epoch_numbers(storage: pa.DataType) -> pa.DataType:
    """``storage`` with timestamps as int64 and dates as int32: the numbers Avro stores."""
    import pyarrow as pa
    if pa.types.is_timestamp(storage):
        return pa.int64()
    if pa.types.is_date32(storage):
        return pa.int32()
    if pa.types.is_struct(storage):
        return pa.struct([pa.field(f.name, _epoch_numbers(f.type)) for f in storage])
    if pa.types.is_list(storage):
        return pa.list_(_epoch_numbers(storage.value_type))
    if pa.types.is_map(storage):
        return pa.map_(storage.key_type, _epoch_numbers(storage.item_type))
    return storage


def _epoch_units(value: Any, per_second: int) -> Any:
    if not isinstance(value, datetime):
        return value
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * per_second + delta.microseconds * per_second // 1_000_000


def _text(value: Any) -> Any:
    """Bytes as the official Python client's ``JsonSchema`` writes them: decoded as UTF-8."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def producer_schema(topic: TopicSchema) -> Any:
    """The schema a producer announces (PRODUCER carries it, so the broker checks or registers
    the version), as the official client takes it; payloads are encoded by :class:`RecordEncoder`."""
    import _pulsar
    from pulsar.schema import Schema

    class _TopicDefinedSchema(Schema):  # type: ignore[misc]
        def encode(self, obj: Any) -> Any:
            return obj

        def decode(self, data: Any) -> Any:
            return data

    kind = _pulsar.SchemaType.AVRO if topic.schema_type == "AVRO" else _pulsar.SchemaType.JSON
    return _TopicDefinedSchema(bytes, kind, topic.avro(), topic.schema_type)

