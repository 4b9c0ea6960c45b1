"""Typed columns from topic schemas, against a real broker and the official client's schema classes:
what the client writes with ``AvroSchema``/``JsonSchema`` Spark reads field for field, what Spark
writes the client reads back as the same records, KEY_VALUE and primitive topics, a schema that
changes under a running query, and a DataFrame that does not fit refused before anything is sent."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Bytes,
    Double,
    Float,
    Integer,
    JsonSchema,
    Long,
    Map,
    Record,
    String,
    StringSchema,
)
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from spark_helpers import Admin, client_for, new_topic, read_values, wait_until

from magnetar.spark.record_encoding import SchemaMismatchError
from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
READ_NS = "public/nodedup"
UTC = dt.UTC


class Address(Record):
    street = String()
    number = Integer()


class Everything(Record):
    """Every field type the official client's Record classes have (enums: see LOGICAL; the
    client's JsonSchema writes an enum's number, not its symbol)."""

    flag = Boolean()
    small = Integer()
    big = Long()
    ratio = Float()
    precise = Double()
    name = String()
    blob = Bytes()
    tags = Array(String())
    counts = Map(Long())
    address = Address()
    maybe = String(required=False)


class Reading(Record):
    sensor = String()
    value = Double()
    seq = Long()
    ok = Boolean()
    labels = Array(String())


#: Avro logical types the client's Record classes cannot declare; written through a plain definition.
LOGICAL = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_micros", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
]}


def read_topic(admin: Admin, prefix: str) -> str:
    """A fresh topic of two partitions in the namespace the source tests read from."""
    topic = new_topic(prefix, READ_NS)
    admin.create_partitioned(topic, 2)
    return topic


def options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url, **extra}


def everything(i: int) -> Everything:
    return Everything(flag=i % 2 == 0, small=i - 50, big=(1 << 40) + i, ratio=i / 4, precise=i / 3,
                      name=f"n{i}", blob=f"b{i}".encode(), tags=[f"t{i}", "x"], counts={"a": i, "b": -i},
                      address=Address(street=f"s{i}", number=i),
                      maybe=None if i % 3 == 0 else f"m{i}")


def publish(client: pulsar.Client, topic: str, schema: Any, records: list[Any], **kwargs: Any) -> None:
    producer = client.create_producer(topic, schema=schema, batching_max_messages=25, **kwargs)
    for record in records:
        producer.send_async(record, None)
    producer.flush()
    producer.close()


def read_rows(spark: SparkSession, broker: BrokerProcess, topic: str) -> list[Any]:
    return spark.read.format("magnetar").options(**options(broker, topic=topic)).load().collect()


def read_records(client: pulsar.Client, topic: str, schema: Any, count: int) -> list[Any]:
    reader_of = [client.create_reader(p, pulsar.MessageId.earliest, schema=schema)
                 for p in client.get_topic_partitions(topic)]
    out = []
    for reader in reader_of:
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=10_000).value())
        reader.close()
    assert len(out) == count
    return out


def test_avro_and_json_records_read_as_columns(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    client = client_for(broker.service_url)
    for schema_class in (AvroSchema, JsonSchema):
        topic = read_topic(admin, "typed")
        records = [everything(i) for i in range(120)]
        publish(client, topic, schema_class(Everything), records)
        df = spark.read.format("magnetar").options(**options(broker, topic=topic)).load()
        assert df.schema.fieldNames()[:11] == ["flag", "small", "big", "ratio", "precise", "name", "blob", "tags",
                                               "counts", "address", "maybe"]
        assert df.schema["address"].dataType == StructType([StructField("street", StringType(), True),
                                                            StructField("number", IntegerType(), True)])
        assert df.schema["counts"].dataType == MapType(StringType(), LongType(), True)
        assert df.schema["tags"].dataType == ArrayType(StringType(), True)
        assert df.schema["blob"].dataType == BinaryType()
        assert "__messageId" in df.schema.fieldNames() and "value" not in df.schema.fieldNames()
        rows = sorted(df.collect(), key=lambda r: r.big)
        assert len(rows) == len(records), schema_class
        for row, rec in zip(rows, records, strict=True):
            assert (row.flag, row.small, row.big, row.name, row.tags, row.counts, row.maybe) == \
                (rec.flag, rec.small, rec.big, rec.name, rec.tags, rec.counts, rec.maybe)
            assert row.ratio == pytest.approx(rec.ratio) and row.precise == rec.precise
            assert row.blob == rec.blob
            assert (row.address.street, row.address.number) == (rec.address.street, rec.address.number)
            assert row["__topic"].startswith(topic)
    client.close()


def test_avro_logical_types_read_as_spark_types(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    topic = read_topic(admin, "logical")
    client = client_for(broker.service_url)
    base = dt.datetime(2024, 2, 29, 23, 59, 58, 123000, tzinfo=UTC)
    records = [{"id": i, "at": base + dt.timedelta(seconds=i), "at_micros": None if i % 2 else base +
                dt.timedelta(microseconds=i), "day": dt.date(1969, 12, 30) + dt.timedelta(days=i),
                "amount": Decimal(f"{i}.{i:03d}").quantize(Decimal("0.001")) * (-1 if i % 2 else 1),
                "kind": "AB"[i % 2]}
               for i in range(40)]
    publish(client, topic, AvroSchema(None, schema_definition=LOGICAL), records)
    client.close()
    df = spark.read.format("magnetar").options(**options(broker, topic=topic)).load()
    assert [df.schema[n].dataType for n in ("at", "at_micros", "day", "amount")] == \
        [TimestampType(), TimestampType(), DateType(), DecimalType(12, 3)]
    rows = sorted(df.collect(), key=lambda r: r.id)
    for row, rec in zip(rows, records, strict=True):
        assert row.at.astimezone(UTC) == rec["at"]
        assert (row.at_micros.astimezone(UTC) if row.at_micros else None) == rec["at_micros"]
        assert (row.day, row.amount, row.kind) == (rec["day"], rec["amount"], rec["kind"])


def test_records_written_by_spark_read_back_with_the_client_schema(spark: SparkSession, broker: BrokerProcess) -> None:
    client = client_for(broker.service_url)
    for schema_class in (AvroSchema, JsonSchema):
        topic = new_topic("spark-avro")
        # the topic's schema: registered by a producer of the official client
        client.create_producer(topic, schema=schema_class(Reading)).close()
        rows = [(f"s{i}", i / 7, i, i % 2 == 0, [f"l{i}"] * (i % 3)) for i in range(200)]
        df = spark.createDataFrame(rows, "sensor string, value double, seq long, ok boolean, labels array<string>")
        df.write.format("magnetar").options(**options(broker, topic=topic)).mode("append").save()
        back = sorted(read_records(client, topic, schema_class(Reading), len(rows)), key=lambda r: r.seq)
        assert [(r.sensor, r.value, r.seq, r.ok, r.labels) for r in back] == rows, schema_class
    client.close()


def test_logical_types_written_by_spark_read_back_with_the_client(spark: SparkSession, broker: BrokerProcess) -> None:
    topic = new_topic("spark-logical")
    client = client_for(broker.service_url)
    schema = AvroSchema(None, schema_definition=LOGICAL)
    client.create_producer(topic, schema=schema).close()
    base = dt.datetime(2023, 6, 1, 12, 0, 0, 5000, tzinfo=UTC)
    rows = [(i, base + dt.timedelta(minutes=i), None, dt.date(2000, 1, 1) + dt.timedelta(days=i),
             Decimal(i) / 8, "BA"[i % 2]) for i in range(30)]
    df = spark.createDataFrame(rows, "id long, at timestamp, at_micros timestamp, day date, amount decimal(12,3), "
                                     "kind string")
    df.write.format("magnetar").options(**options(broker, topic=topic)).mode("append").save()
    back = sorted(read_records(client, topic, schema, len(rows)), key=lambda r: r["id"])
    assert [(r["id"], r["at"], r["at_micros"], r["day"], r["amount"], r["kind"]) for r in back] == \
        [(i, at, None, day, amount.quantize(Decimal("0.001")), kind) for i, at, _, day, amount, kind in rows]
    client.close()


def test_a_dataframe_that_does_not_fit_the_schema_is_refused_before_sending(spark: SparkSession,
                                                                          broker: BrokerProcess) -> None:
    topic = new_topic("mismatch")
    client = client_for(broker.service_url)
    client.create_producer(topic, schema=AvroSchema(Reading)).close()
    writer = spark.createDataFrame([("s", 1.0, 1, True, ["x"], 5)],
                                   "sensor string, value double, seq long, ok boolean, labels array<string>, extra int")
    cases = [(writer, "column 'extra' is not a field"),
             (writer.drop("extra").withColumn("seq", writer.seq.cast("string")), "column 'seq' has type string"),
             (writer.drop("extra").withColumn("labels", writer.sensor), "column 'labels' has type string")]
    for df, message in cases:
        with pytest.raises(Exception, match=message) as caught:
            df.write.format("magnetar").options(**options(broker, topic=topic)).mode("append").save()
        assert SchemaMismatchError.__name__ in str(caught.value) or message in str(caught.value)
    assert read_values(client, topic) == []  # nothing was sent
    client.close()
    # A field that is neither nullable nor defaulted needs its column (LOGICAL's id is a plain long).
    logical = new_topic("mismatch-logical")
    client = client_for(broker.service_url)
    client.create_producer(logical, schema=AvroSchema(None, schema_definition=LOGICAL)).close()
    client.close()
    df = spark.createDataFrame([(dt.date(2020, 1, 1),)], "day date")
    with pytest.raises(Exception, match="no column 'id'"):
        df.write.format("magnetar").options(**options(broker, topic=logical)).mode("append").save()


def _upload(broker: BrokerProcess, topic: str, body: dict[str, Any]) -> None:
    import httpx
    path = topic.replace("persistent://", "")
    resp = httpx.post(f"{broker.web_url}/admin/v2/schemas/{path}/schema", json=body, timeout=15)
    assert resp.status_code == 200, resp.text


def _send_raw(client: pulsar.Client, topic: str, payloads: list[bytes | None],
              keys: list[str | None] | None = None) -> None:
    producer = client.create_producer(topic, batching_max_messages=20)
    for i, payload in enumerate(payloads):
        key = keys[i] if keys else None
        if payload is None:
            producer._producer.send_async(_null_message(key), None)
        else:
            producer.send_async(payload, None, partition_key=key)
    producer.flush()
    producer.close()


def _null_message(key: str | None) -> Any:
    import _pulsar
    builder = _pulsar.MessageBuilder()
    builder.set_null_value()
    if key:
        builder.partition_key(key)
    return builder.build()


def test_key_value_topics_read_as_key_and_value(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    client = client_for(broker.service_url)
    value_avro = {"type": "record", "name": "V", "fields": [{"name": "n", "type": "int"},
                                                          {"name": "s", "type": ["null", "string"]}]}
    import io

    import fastavro

    def avro(n: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(value_avro), {"n": n, "s": f"s{n}"})
        return out.getvalue()

    inline = read_topic(admin, "kv-inline")
    _upload(broker, inline, {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": value_avro}),
                             "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO",
                                            "kv.encoding.type": "INLINE"}})
    payloads = [struct.pack(">i", 2) + f"k{i}".encode()[:2] + struct.pack(">i", len(avro(i))) + avro(i)
                for i in range(10)]
    _send_raw(client, inline, payloads)
    rows = sorted(read_rows(spark, broker, inline), key=lambda r: r.value.n)
    assert [(r.key, r.value.n, r.value.s) for r in rows] == [(f"k{i}"[:2], i, f"s{i}") for i in range(10)]

    separated = read_topic(admin, "kv-separated")
    _upload(broker, separated, {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": ""}),
                                "properties": {"key.schema.type": "INT32", "value.schema.type": "STRING",
                                               "kv.encoding.type": "SEPARATED"}})
    keys = [base64.b64encode(struct.pack(">i", -i)).decode() for i in range(10)]
    _send_raw(client, separated, [f"v{i}".encode() for i in range(9)] + [None], keys)
    rows = sorted(read_rows(spark, broker, separated), key=lambda r: -r.key)
    assert [(r.key, r.value) for r in rows] == [(-i, f"v{i}" if i < 9 else None) for i in range(10)]
    client.close()


def test_primitive_schemas_read_as_a_typed_value(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    client = client_for(broker.service_url)
    text = read_topic(admin, "string")
    publish(client, text, StringSchema(), [f"héllo {i}" for i in range(30)])
    assert sorted(r.value for r in read_rows(spark, broker, text)) == sorted(f"héllo {i}" for i in range(30))
    moment = dt.datetime(2024, 1, 1, tzinfo=UTC)
    # (the other primitive types and their encodings: test_spark_schema_units.py)
    cases: list[tuple[str, list[bytes], list[Any]]] = [
        ("INT64", [struct.pack(">q", v) for v in (-1, 0, 1 << 50)], [-1, 0, 1 << 50]),
        ("BOOLEAN", [b"\x01", b"\x00"], [True, False]),
        ("TIMESTAMP", [struct.pack(">q", int(moment.timestamp() * 1000) + 7)], [moment + dt.timedelta(milliseconds=7)]),
    ]
    for kind, payloads, expected in cases:
        topic = read_topic(admin, kind.lower())
        _upload(broker, topic, {"type": kind, "schema": "", "properties": {}})
        _send_raw(client, topic, payloads)
        values = [r.value for r in read_rows(spark, broker, topic)]
        if kind == "TIMESTAMP":
            values = [v.astimezone(UTC) for v in values]
        assert sorted(values) == sorted(expected), kind
    client.close()


def test_a_schema_change_under_a_running_query(spark: SparkSession, broker: BrokerProcess, admin: Admin,
                                               tmp_path: Path) -> None:
    """The query keeps the columns of the version it started with: a field added later is not read,
    and a field the newer version dropped is null in the newer messages."""
    topic = read_topic(admin, "evolving")
    client = client_for(broker.service_url)
    v1 = {"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"},
                                                   {"name": "b", "type": ["null", "string"], "default": None}]}
    v2 = {"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"},
                                                   {"name": "c", "type": ["null", "string"], "default": None}]}
    publish(client, topic, AvroSchema(None, schema_definition=v1), [{"a": i, "b": f"b{i}"} for i in range(5)])
    stream = (spark.readStream.format("magnetar").options(**options(broker, topic=topic))
              .option("startingOffsets", "earliest").load())
    assert stream.schema.fieldNames()[:2] == ["a", "b"]
    query = (stream.select("a", "b").writeStream.format("memory").queryName("evolving")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        query.processAllAvailable()
        publish(client, topic, AvroSchema(None, schema_definition=v2), [{"a": i, "c": f"c{i}"} for i in range(5, 9)])
        wait_until(lambda: query.processAllAvailable() or
                   spark.sql("select count(*) from evolving").first()[0] == 9, what="the newer messages")
        rows = sorted(tuple(r) for r in spark.sql("select a, b from evolving").collect())
        assert rows == [(i, f"b{i}") for i in range(5)] + [(i, None) for i in range(5, 9)]
    finally:
        query.stop()
    # A query started now reads with the latest version: the older messages have no c.
    latest = sorted(tuple(r)[:2] for r in read_rows(spark, broker, topic))
    assert latest == [(i, None) for i in range(5)] + [(i, f"c{i}") for i in range(5, 9)]
    client.close()
