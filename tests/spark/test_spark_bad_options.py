"""Bad or contradictory options fail when the query starts, before any task runs.

Every rule is checked in test_spark_units; these cases show that Spark surfaces the
message at ``load()``, at ``start()`` and at ``save()``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark

TOPIC = "persistent://public/default/never-read"


def base(broker: BrokerProcess) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url}


def test_bad_read_options_fail_at_load(spark: SparkSession, broker: BrokerProcess) -> None:
    reader = spark.read.format("magnetar").options(**base(broker), topic=TOPIC, startingOffset="earliest")
    with pytest.raises(Exception, match="unknown option 'startingoffset'"):
        reader.load()
    reader = spark.read.format("magnetar").options(**base(broker), topic=TOPIC, maxRecordsPerTrigger="5")
    with pytest.raises(Exception, match="maxRecordsPerTrigger applies to streaming reads only"):
        reader.load().collect()


def test_bad_stream_read_options_fail_at_start(spark: SparkSession, broker: BrokerProcess,
                                               tmp_path: Path) -> None:
    stream = spark.readStream.format("magnetar").options(**base(broker), topic=TOPIC, endingOffsets="latest")
    with pytest.raises(Exception, match="endingOffsets applies to batch reads only"):
        stream.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start() \
            .awaitTermination(60)


@pytest.mark.parametrize(("options", "columns", "mode", "message"), [
    ({}, "value string", "overwrite", "append-only"),
    ({}, "payload string", "append", "needs a 'value' column"),
    ({"topic": None}, "value string", "append", "set the 'topic' option or give each row a '__topic'"),
    ({"pulsar.producer.producerName": "mine"}, "value string", "append", "producerName cannot be set"),
])
def test_bad_write_options_fail_at_save(spark: SparkSession, broker: BrokerProcess,
                                        options: dict[str, str | None], columns: str, mode: str,
                                        message: str) -> None:
    df = spark.createDataFrame([], columns)
    merged = {**base(broker), "topic": TOPIC, **options}
    writer = df.write.format("magnetar").options(**{k: v for k, v in merged.items() if v is not None})
    with pytest.raises(Exception, match=message):
        writer.mode(mode).save()
