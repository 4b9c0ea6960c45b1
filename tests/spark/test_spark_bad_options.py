"""Bad or contradictory options fail when the query starts, with a message naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark

TOPIC = "persistent://public/default/never-read"


def base(broker: BrokerProcess) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url}


@pytest.mark.parametrize(("options", "message"), [
    ({"service.url": None}, "service.url is required"),
    ({"service.url": "http://localhost:6650"}, "expected a pulsar:// or pulsar\\+ssl:// URL"),
    ({"admin.url": None}, "admin.url is required"),
    ({"topics": "a,b"}, "set exactly one of topic, topics or topicsPattern"),
    ({"startingOffset": "earliest"}, "unknown option 'startingoffset'"),
    ({"startingOffsets": "first"}, "expected earliest or latest or a JSON object"),
    ({"startingOffsets": "earliest", "startingTime": "1000"}, "contradict each other"),
    ({"endingOffsets": "earliest"}, "expected latest or a JSON object"),
    ({"maxRecordsPerTrigger": "10"}, "applies to streaming reads only"),
    ({"failOnDataLoss": "maybe"}, "expected true or false"),
    ({"pulsar.client.operationTimeoutMs": "soon"}, "expected an integer"),
    ({"pulsar.client.bogus": "1"}, "unknown option pulsar.client.bogus"),
    ({"writeId": "w"}, "writeId does not apply when reading"),
    ({"topic": None, "topicsPattern": "persistent://public/def.*/x"}, "literal tenant and namespace"),
])
def test_bad_batch_read_options(spark: SparkSession, broker: BrokerProcess, options: dict[str, str | None],
                                message: str) -> None:
    merged = {**base(broker), "topic": TOPIC, **options}
    reader = spark.read.format("magnetar").options(**{k: v for k, v in merged.items() if v is not None})
    with pytest.raises(Exception, match=message):
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
    ({}, "value string, extra int", "append", "column 'extra' is not written"),
    ({"topic": None}, "value string", "append", "set the 'topic' option or give each row a '__topic'"),
    ({"startingOffsets": "earliest"}, "value string", "append", "startingOffsets does not apply when writing"),
    ({"pulsar.producer.producerName": "mine"}, "value string", "append", "producerName cannot be set"),
    ({"pulsar.producer.initialSequenceId": "10"}, "value string", "append",
     "derives every sequence id"),
])
def test_bad_write_options(spark: SparkSession, broker: BrokerProcess, options: dict[str, str | None],
                           columns: str, mode: str, message: str) -> None:
    df = spark.createDataFrame([], columns)
    merged = {**base(broker), "topic": TOPIC, **options}
    writer = df.write.format("magnetar").options(**{k: v for k, v in merged.items() if v is not None})
    with pytest.raises(Exception, match=message):
        writer.mode(mode).save()
