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
from magnetar.spark.schema import SOURCE_SCHEMA, check_sink_schema, check_source_schema
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
        parse_source_options(self.options, streaming=None)
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_source_schema(schema)
        return MagnetarBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_source_schema(schema)
        return MagnetarStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(self.options, streaming=False)
        if overwrite:
            raise MagnetarOptionError("a Magnetar topic is append-only; use mode('append'), not overwrite")
        check_sink_schema(schema, topic_option=options.topic)
        return MagnetarBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        check_sink_schema(schema, topic_option=options.topic)
        return MagnetarStreamWriter(options)
