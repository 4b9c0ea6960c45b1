"""Row layouts: the source's fixed schema and the columns the sink accepts.

Source columns carry pulsar-spark's names: the payload as ``value`` and the message
metadata in ``__``-prefixed columns. The sink takes ``value`` plus the optional
metadata columns a producer can set; any other column is refused at query start so a
typo does not silently drop data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.spark.options import MagnetarOptionError

if TYPE_CHECKING:
    import pyarrow as pa

    from magnetar.spark.schema_mapping import TopicSchema

VALUE = "value"
KEY = "__key"
TOPIC = "__topic"
MESSAGE_ID = "__messageId"
PUBLISH_TIME = "__publishTime"
EVENT_TIME = "__eventTime"
MESSAGE_PROPERTIES = "__messageProperties"
PRODUCER_NAME = "__producerName"
REDELIVERY_COUNT = "__redeliveryCount"

SOURCE_SCHEMA = StructType([
    StructField(VALUE, BinaryType(), True),
    StructField(KEY, StringType(), True),
    StructField(TOPIC, StringType(), True),
    StructField(MESSAGE_ID, BinaryType(), True),
    StructField(PUBLISH_TIME, TimestampType(), True),
    StructField(EVENT_TIME, TimestampType(), True),
    StructField(MESSAGE_PROPERTIES, MapType(StringType(), StringType(), True), True),
    StructField(PRODUCER_NAME, StringType(), True),
    StructField(REDELIVERY_COUNT, IntegerType(), True),
])

#: Columns the sink reads, and the Spark types each may have.
SINK_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    VALUE: (BinaryType, StringType),
    KEY: (StringType, BinaryType),
    MESSAGE_PROPERTIES: (MapType,),
    EVENT_TIME: (TimestampType,),
    TOPIC: (StringType,),
}


def source_schema(topic_schema: TopicSchema | None = None) -> StructType:
    """The source's columns: typed ones from the topic's schema when it has one (see
    :mod:`magnetar.spark.schema_mapping`), the binary ``value`` otherwise; then the metadata."""
    if topic_schema is None:
        return SOURCE_SCHEMA
    from magnetar.spark.schema_mapping import source_struct
    return source_struct(topic_schema, SOURCE_SCHEMA)


def source_arrow_schema(topic_schema: TopicSchema | None = None) -> pa.Schema:
    """The Arrow schema Spark expects record batches in (microsecond UTC timestamps)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(source_schema(topic_schema), timezone="UTC")


def check_source_schema(schema: StructType, topic_schema: TopicSchema | None = None) -> None:
    expected = source_schema(topic_schema)
    if schema != expected:
        raise MagnetarOptionError(
            "the magnetar source's columns come from the topic's schema; do not pass .schema(...), and "
            "restart a query whose topic schema changed since it was defined. Expected "
            f"{expected.simpleString()}, got {schema.simpleString()}")


def check_sink_schema(schema: StructType, *, topic_option: str | None,
                      topic_schema: TopicSchema | None = None) -> None:
    if topic_schema is not None:
        from magnetar.spark.record_encoding import check_record_columns
        # The payload comes from the fields, and its schema holds for the `topic` option's topic only.
        check_record_columns(schema, topic_schema,
                             metadata={k: v for k, v in SINK_COLUMNS.items() if k not in (VALUE, TOPIC)})
        return
    names = schema.fieldNames()
    if VALUE not in names:
        raise MagnetarOptionError(f"the magnetar sink needs a '{VALUE}' column (binary or string); the "
                                  f"DataFrame has {', '.join(names) or 'no columns'}")
    for f in schema.fields:
        allowed = SINK_COLUMNS.get(f.name)
        if allowed is None:
            raise MagnetarOptionError(
                f"column '{f.name}' is not written by the magnetar sink; keep only "
                f"{', '.join(SINK_COLUMNS)} (select or drop the others)")
        if not isinstance(f.dataType, allowed):
            kinds = " or ".join(k.typeName() for k in allowed)
            raise MagnetarOptionError(f"column '{f.name}' has type {f.dataType.simpleString()}; expected {kinds}")
        if isinstance(f.dataType, MapType) and not (
                isinstance(f.dataType.keyType, StringType) and isinstance(f.dataType.valueType, StringType)):
            raise MagnetarOptionError(f"column '{f.name}' must be map<string,string>, not "
                                      f"{f.dataType.simpleString()}")
    if topic_option is None and TOPIC not in names:
        raise MagnetarOptionError(f"set the 'topic' option or give each row a '{TOPIC}' column")
