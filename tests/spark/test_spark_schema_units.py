"""The schema mapping, payload decoding and row encoding of the data source, without Spark or a broker."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import struct
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from magnetar.spark.record_decoding import RecordDecodingError, SchemaVersions, TypedColumns, segments
from magnetar.spark.record_encoding import RecordEncoder, SchemaMismatchError, check_record_columns
from magnetar.spark.schema import SINK_COLUMNS, SOURCE_SCHEMA, check_sink_schema, source_schema
from magnetar.spark.schema_mapping import SchemaMappingError, TopicSchema, avro_to_spark, data_fields

pytestmark = pytest.mark.spark
UTC = dt.UTC

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.example",
           "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}
PERSON = {"type": "record", "name": "Person", "namespace": "com.example", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "score", "type": "float"},
    {"name": "weight", "type": "double"},
    {"name": "active", "type": "boolean"},
    {"name": "photo", "type": "bytes"},
    {"name": "home", "type": ADDRESS},
    {"name": "work", "type": ["null", "Address"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "scores", "type": {"type": "map", "values": "int"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "digest", "type": {"type": "fixed", "name": "Md5", "size": 4}},
    {"name": "born", "type": {"type": "int", "logicalType": "date"}},
    {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "seen_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
    {"name": "wide", "type": ["int", "long"]},
]}


def avro_schema(avro: Any, version: int = 0) -> TopicSchema:
    return TopicSchema("AVRO", json.dumps(avro), {}, version)


def encode(avro: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(avro), record)
    return out.getvalue()


def person(i: int) -> dict[str, Any]:
    return {"id": i, "name": None if i % 2 else f"p{i}", "score": 0.5, "weight": i / 3, "active": i % 2 == 0,
            "photo": bytes([i, 255]), "home": {"street": f"s{i}", "zip": None}, "work": {"street": "w", "zip": i},
            "tags": ["a"] * i, "scores": {"x": i}, "kind": "AB"[i % 2], "digest": b"\x00\x01\x02\x03",
            "born": dt.date(1990, 1, 1) + dt.timedelta(days=i),
            "seen": dt.datetime(2024, 1, 1, 0, 0, i, 7000, tzinfo=UTC),
            "seen_us": dt.datetime(2024, 1, 1, 0, 0, 0, i, tzinfo=UTC),
            "local": dt.datetime(2024, 1, 1, 12, 0, i), "balance": Decimal(f"-{i}.0125"), "wide": i}


def decoder(schema: TopicSchema, older: dict[int, TopicSchema] | None = None) -> TypedColumns:
    known = {schema.version: schema, **(older or {})}
    return TypedColumns(SchemaVersions(schema, lambda v: known[v]))


# -- mapping ---------------------------------------------------------------------------------------

def test_avro_records_map_field_by_field() -> None:
    fields = {f.name: f.dataType for f in data_fields(avro_schema(PERSON))}
    address = StructType([StructField("street", StringType(), True), StructField("zip", IntegerType(), True)])
    assert fields == {
        "id": LongType(), "name": StringType(), "score": FloatType(), "weight": DoubleType(), "active": BooleanType(),
        "photo": BinaryType(), "home": address, "work": address, "tags": ArrayType(StringType(), True),
        "scores": MapType(StringType(), IntegerType(), True), "kind": StringType(), "digest": BinaryType(),
        "born": DateType(), "seen": TimestampType(), "seen_us": TimestampType(), "local": TimestampNTZType(),
        "balance": DecimalType(20, 4), "wide": LongType()}


def test_source_schema_keeps_the_metadata_columns() -> None:
    typed = source_schema(avro_schema(PERSON))
    assert typed.fieldNames()[:2] == ["id", "name"]
    assert typed.fieldNames()[len(PERSON["fields"]):] == SOURCE_SCHEMA.fieldNames()[1:]
    assert source_schema(None) == SOURCE_SCHEMA
    assert source_schema(TopicSchema("PROTOBUF_NATIVE", "x")) == SOURCE_SCHEMA
    assert source_schema(TopicSchema("BYTES", "")) == SOURCE_SCHEMA


@pytest.mark.parametrize(("kind", "spark_type"), [
    ("STRING", StringType()), ("INT64", LongType()), ("BOOLEAN", BooleanType()), ("DATE", DateType()),
    ("TIMESTAMP", TimestampType()), ("INSTANT", TimestampType()), ("LOCAL_DATE_TIME", TimestampNTZType())])
def test_primitive_schemas_give_a_typed_value(kind: str, spark_type: Any) -> None:
    assert data_fields(TopicSchema(kind, "")) == [StructField("value", spark_type, True)]


def test_key_value_schemas_give_key_and_value() -> None:
    kv = TopicSchema("KEY_VALUE", json.dumps({"key": "", "value": ADDRESS}),
                     {"key.schema.type": "INT32", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"})
    assert [(f.name, f.dataType.typeName()) for f in data_fields(kv)] == [("key", "integer"), ("value", "struct")]
    assert kv.key_value_encoding == "SEPARATED"


@pytest.mark.parametrize(("avro", "message"), [
    ({"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N2"]}]}, "not defined before"),
    (["int", "string"], "several non-null branches"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "does not fit a Spark decimal"),
    ({"type": "record", "name": "R", "fields": [{"name": "__key", "type": "string"}]}, "name of a metadata column"),
    (42, "not an Avro schema"),
])
def test_schemas_without_a_spark_layout_are_refused(avro: Any, message: str) -> None:
    with pytest.raises(SchemaMappingError, match=message):
        source_schema(avro_schema(avro))


def test_named_types_are_reused() -> None:
    assert avro_to_spark(PERSON)["work"].dataType == avro_to_spark(ADDRESS)  # type: ignore[index]


# -- decoding --------------------------------------------------------------------------------------

def test_avro_payloads_decode_into_columns_with_nulls() -> None:
    schema = avro_schema(PERSON)
    records = [person(i) for i in range(5)]
    values = [encode(PERSON, r) for r in records[:2]] + [None] + [encode(PERSON, r) for r in records[3:]]
    columns = decoder(schema).columns(values, [None] * 5, [(3, 0), (5, -1)])
    batch = pa.RecordBatch.from_arrays(columns, names=[f["name"] for f in PERSON["fields"]])
    rows = batch.to_pylist()
    assert rows[2] == dict.fromkeys(rows[2])
    for i in (0, 1, 3, 4):
        expected = dict(records[i], local=records[i]["local"])
        got = rows[i]
        assert got["seen"] == expected["seen"] and got["seen_us"] == expected["seen_us"]
        assert got["local"] == expected["local"] and got["born"] == expected["born"]
        assert got["balance"] == expected["balance"] and got["scores"] == [("x", i)]
        assert {k: got[k] for k in ("id", "name", "photo", "home", "work", "tags", "kind", "digest", "wide")} == \
            {k: expected[k] for k in ("id", "name", "photo", "home", "work", "tags", "kind", "digest", "wide")}
    assert pa.schema([pa.field("x", c.type) for c in columns]).field(0).type == pa.int64()


def test_older_versions_decode_into_the_latest_columns() -> None:
    v1 = {"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"}, {"name": "gone", "type": "string"}]}
    v2 = {"type": "record", "name": "E", "fields": [{"name": "a", "type": "long"},
                                                   {"name": "new", "type": ["null", "string"], "default": None}]}
    latest = avro_schema(v2, 1)
    values = [encode(v1, {"a": 1, "gone": "x"}), encode(v2, {"a": 2, "new": "y"})]
    columns = decoder(latest, {0: avro_schema(v1, 0)}).columns(values, [None, None], [(1, 0), (2, 1)])
    assert [c.to_pylist() for c in columns] == [[1, 2], [None, "y"]]


def test_a_payload_that_does_not_decode_is_named() -> None:
    schema = avro_schema(ADDRESS)
    good = encode(ADDRESS, {"street": "s", "zip": 1})
    with pytest.raises(RecordDecodingError, match=r"row 1 .* bytes after the record|row 1 .* does not decode"):
        decoder(schema).columns([good, good + b"\x02\x41", good], [None] * 3, [(3, 0)])
    with pytest.raises(RecordDecodingError, match="row 0"):
        decoder(schema).columns([b"\x09"], [None], [(1, 0)])


def test_a_version_of_another_type_is_refused() -> None:
    latest = avro_schema(ADDRESS, 1)
    with pytest.raises(RecordDecodingError, match="schema version 0 are JSON"):
        decoder(latest, {0: TopicSchema("JSON", json.dumps(ADDRESS), {}, 0)}).columns([b"x"], [None], [(1, 0)])


def test_json_payloads_decode_with_logical_types() -> None:
    avro = {"type": "record", "name": "J", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "x", "type": "double"}]}},
        {"name": "raw", "type": "bytes"}]}
    schema = TopicSchema("JSON", json.dumps(avro), {}, 0)
    values = [json.dumps({"at": 1_700_000_000_123, "day": 3, "inner": {"x": 1.5}, "raw": "hi"}).encode(), None,
              json.dumps({"day": 4, "unknown": 1}).encode()]
    columns = decoder(schema).columns(values, [None] * 3, [(3, 0)])
    assert columns[0].to_pylist()[0] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert columns[1].to_pylist() == [dt.date(1970, 1, 4), None, dt.date(1970, 1, 5)]
    assert columns[2].to_pylist() == [{"x": 1.5}, None, None]
    assert columns[3].to_pylist() == [b"hi", None, None]
    with pytest.raises(RecordDecodingError, match="not JSON"):
        decoder(schema).columns([b"{nope"], [None], [(1, 0)])


@pytest.mark.parametrize(("kind", "payload", "expected"), [
    ("INT8", b"\xff", -1), ("INT16", struct.pack(">h", -2), -2), ("INT32", struct.pack(">i", 1 << 30), 1 << 30),
    ("INT64", struct.pack(">q", -(1 << 60)), -(1 << 60)), ("FLOAT", struct.pack(">f", 0.25), 0.25),
    ("DOUBLE", struct.pack(">d", -1e300), -1e300), ("BOOLEAN", b"\x01", True), ("STRING", "żółw".encode(), "żółw"),
    ("BYTES", b"\x00\xff", b"\x00\xff"), ("TIME", struct.pack(">q", 3_600_000), 3_600_000),
    ("DATE", struct.pack(">q", -1), dt.date(1969, 12, 31)),
    ("TIMESTAMP", struct.pack(">q", 86_400_001), dt.datetime(1970, 1, 2, 0, 0, 0, 1000, tzinfo=UTC)),
    ("LOCAL_DATE", struct.pack(">q", 365), dt.date(1971, 1, 1)),
    ("INSTANT", struct.pack(">qi", -1, 999_999_000), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ("LOCAL_DATE_TIME", struct.pack(">qq", 1, 1_000), dt.datetime(1970, 1, 2, 0, 0, 0, 1)),
])
def test_primitive_payloads_decode_with_pulsars_encodings(kind: str, payload: bytes, expected: Any) -> None:
    columns = decoder(TopicSchema(kind, "")).columns([payload, None, payload], [None] * 3, [(3, -1)])
    assert len(columns) == 1
    got = columns[0].to_pylist()
    assert got[1] is None and got[0] == got[2]
    if isinstance(expected, dt.datetime) and expected.tzinfo is not None:
        assert got[0].astimezone(UTC) == expected
    else:
        assert got[0] == expected


def test_primitive_payloads_of_the_wrong_size_are_refused() -> None:
    with pytest.raises(RecordDecodingError, match="not 8 bytes long"):
        decoder(TopicSchema("INT64", "")).columns([b"\x00" * 8, b"\x00" * 4], [None] * 2, [(2, 0)])
    with pytest.raises(RecordDecodingError, match="not UTF-8"):
        decoder(TopicSchema("STRING", "")).columns([b"\xff"], [None], [(1, 0)])


def _inline(key: bytes | None, value: bytes | None) -> bytes:
    def part(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b
    return part(key) + part(value)


def test_key_value_inline_and_separated() -> None:
    props = {"key.schema.type": "STRING", "value.schema.type": "AVRO"}
    inline = TopicSchema("KEY_VALUE", json.dumps({"key": "", "value": ADDRESS}), props, 0)
    values = [_inline(b"k", encode(ADDRESS, {"street": "s", "zip": 2})), _inline(None, None), None]
    key, value = decoder(inline).columns(values, [None] * 3, [(3, 0)])
    assert key.to_pylist() == ["k", None, None]
    assert value.to_pylist() == [{"street": "s", "zip": 2}, None, None]
    with pytest.raises(RecordDecodingError, match="not INLINE-encoded"):
        decoder(inline).columns([b"\x00\x00\x00\x09ab"], [None], [(1, 0)])

    separated = TopicSchema("KEY_VALUE", json.dumps({"key": "", "value": ""}),
                            {"key.schema.type": "INT32", "value.schema.type": "STRING",
                             "kv.encoding.type": "SEPARATED"}, 0)
    keys = [base64.b64encode(struct.pack(">i", 7)).decode(), None]
    key, value = decoder(separated).columns([b"v", b"w"], keys, [(2, 0)])
    assert (key.to_pylist(), value.to_pylist()) == ([7, None], ["v", "w"])


def test_segments_join_runs_of_one_version() -> None:
    assert list(segments([(2, 0), (5, 0), (6, 1), (9, -1), (10, -1)])) == [(0, 5, 0), (5, 6, 1), (6, 10, -1)]
    assert list(segments([])) == []


# -- encoding --------------------------------------------------------------------------------------

WRITE = {"type": "record", "name": "W", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "raw", "type": "bytes"}]}
WRITE_COLUMNS = StructType([StructField("id", IntegerType()), StructField("at", TimestampType()),
                            StructField("day", DateType()), StructField("attrs", MapType(StringType(), LongType())),
                            StructField("raw", BinaryType()), StructField("__key", StringType())])


def test_columns_are_checked_against_the_schema() -> None:
    schema = avro_schema(WRITE)
    check_record_columns(WRITE_COLUMNS, schema, SINK_COLUMNS)  # int widens to long; note is optional
    cases = [
        (StructType([*WRITE_COLUMNS.fields, StructField("extra", StringType())]), "column 'extra' is not a field"),
        (StructType([f for f in WRITE_COLUMNS.fields if f.name != "at"]), "no column 'at'"),
        (StructType([StructField("id", StringType())] + WRITE_COLUMNS.fields[1:]), "column 'id' has type string"),
        (StructType(WRITE_COLUMNS.fields[:3] + [StructField("attrs", MapType(StringType(), StringType()))] +
                    WRITE_COLUMNS.fields[4:]), "column 'attrs' has type map<string,string>"),
        (StructType([*WRITE_COLUMNS.fields, StructField("__eventTime", StringType())]),
         "column '__eventTime' is not a field"),
    ]
    for columns, message in cases:
        with pytest.raises(SchemaMismatchError, match=message):
            check_record_columns(columns, schema, SINK_COLUMNS)
    # through the sink's check: neither a binary value nor per-row topics beside the fields
    for extra in ("value", "__topic"):
        with pytest.raises(SchemaMismatchError, match=f"column '{extra}' is not a field"):
            check_sink_schema(StructType([*WRITE_COLUMNS.fields, StructField(extra, StringType())]),
                              topic_option="persistent://public/default/t", topic_schema=schema)


def _write_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([
        {"id": 1, "at": dt.datetime(2024, 5, 1, 1, 2, 3, 4000, tzinfo=UTC), "day": dt.date(2024, 5, 1),
         "attrs": [("a", 1)], "raw": b"ok", "__key": "k"},
        {"id": 2, "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), "day": dt.date(1969, 1, 1),
         "attrs": [], "raw": b"x", "__key": None},
    ], schema=pa.schema([("id", pa.int32()), ("at", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
                         ("attrs", pa.map_(pa.string(), pa.int64())), ("raw", pa.binary()), ("__key", pa.string())]))


def test_rows_encode_as_the_clients_avro_schema_writes_them() -> None:
    batch = _write_batch()
    encoded = RecordEncoder(avro_schema(WRITE), batch.schema.names).encode(batch)
    assert encoded.schema.names == ["value", "__key"] and encoded.column(1).to_pylist() == ["k", None]
    parsed = fastavro.parse_schema(WRITE)
    back = [fastavro.schemaless_reader(io.BytesIO(v), parsed, None) for v in encoded.column(0).to_pylist()]
    assert back[0] == {"id": 1, "note": None, "at": dt.datetime(2024, 5, 1, 1, 2, 3, 4000, tzinfo=UTC),
                       "day": dt.date(2024, 5, 1), "attrs": {"a": 1}, "raw": b"ok"}
    assert back[1]["at"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


def test_rows_encode_as_json_with_epoch_numbers() -> None:
    batch = _write_batch()
    encoded = RecordEncoder(TopicSchema("JSON", json.dumps(WRITE), {}, 0), batch.schema.names).encode(batch)
    docs = [json.loads(v) for v in encoded.column(0).to_pylist()]
    assert docs[0] == {"id": 1, "at": 1714525323004, "day": 19844, "attrs": {"a": 1}, "raw": "ok"}
    assert docs[1]["at"] == -1 and docs[1]["day"] == -365
    # and they decode back into the same columns
    columns = decoder(TopicSchema("JSON", json.dumps(WRITE), {}, 0)).columns(
        [json.dumps(d).encode() for d in docs], [None, None], [(2, 0)])
    assert columns[2].to_pylist() == [dt.datetime(2024, 5, 1, 1, 2, 3, 4000, tzinfo=UTC),
                                      dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)]
    assert columns[5].to_pylist() == [b"ok", b"x"]


def test_the_columnar_and_the_row_decoders_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    from magnetar.spark import record_decoding
    without_map = {**PERSON, "fields": [f for f in PERSON["fields"] if f["name"] != "scores"]}
    schema = avro_schema(without_map)
    values: list[bytes | None] = [encode(without_map, person(i)) for i in range(20)]
    columnar = decoder(schema).columns(values, [None] * 20, [(20, 0)])
    calls = []
    monkeypatch.setattr(record_decoding.AvroValues, "_columnar", lambda *args: calls.append(args) and None)
    rows = decoder(schema).columns(values, [None] * 20, [(20, 0)])
    assert calls and [c.to_pylist() for c in columnar] == [r.to_pylist() for r in rows]
    assert [c.type for c in columnar] == [r.type for r in rows]
    # a payload with a byte left over shifts the frames: the row decoder names it
    monkeypatch.undo()
    with pytest.raises(RecordDecodingError, match="row 3"):
        decoder(schema).columns(values[:3] + [values[3] + b"\x00"] + values[4:], [None] * 20, [(20, 0)])
