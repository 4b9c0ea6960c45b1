"""``MagnetarDataSource``: the ``magnetar`` format, tying options, source and sink together."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from magnetar.spark.options import MagnetarOptionError, parse_sink_options, parse_source_options
from magnetar.spark.planning import resolve_partitions
from magnetar.spark.schema import check_sink_schema, check_source_schema, source_schema
from magnetar.spark.schema_resolution import with_read_schema, with_write_schema
from magnetar.spark.sink import MagnetarBatchWriter, MagnetarStreamWriter
from magnetar.spark.source import MagnetarBatchReader, MagnetarStreamReader


class MagnetarDataSource(DataSource):
    """Read Magnetar (or Pulsar) topics as DataFrames and write DataFrames to them, effectively once.

    Register once per session, then use the ``magnetar`` format::

        spark.dataSource.register(MagnetarDataSource)
        df = (spark.readStream.format("magnetar")
              .option("service.url", "pulsar://localhost:6650")
              .option("admin.url", "http://localhost:8080")
              .option("topic", "events").load())
    """

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> StructType:
        # Spark asks for the schema at load(): the earliest moment to reject bad options.
        # The topic's schema decides the columns: fetched now, and again by reader(), which
        # checks that it has not changed in between.
        options = with_read_schema(parse_source_options(self.options, streaming=None), resolve_partitions)
        return source_schema(options.topic_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = with_read_schema(parse_source_options(self.options, streaming=False), resolve_partitions)
        check_source_schema(schema, options.topic_schema)
        return MagnetarBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = with_read_schema(parse_source_options(self.options, streaming=True), resolve_partitions)
        check_source_schema(schema, options.topic_schema)
        return MagnetarStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(self.options, streaming=False)
        if overwrite:
            raise MagnetarOptionError("a Magnetar topic is append-only; use mode('append'), not overwrite")
        options = with_write_schema(options)
        check_sink_schema(schema, topic_option=options.topic, topic_schema=options.topic_schema)
        return MagnetarBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        options = with_write_schema(options)
        check_sink_schema(schema, topic_option=options.topic, topic_schema=options.topic_schema)
        return MagnetarStreamWriter(options)
