"""The source against a real broker: batch reads, streams resumed from checkpoints, data loss."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType
from spark_helpers import LEDGER_ENTRIES, Admin, client_for, new_topic, produce, wait_until

from magnetar.spark.offsets import MessagePosition
from magnetar.spark.schema import SOURCE_SCHEMA
from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
#: Source tests use a namespace without deduplication: its snapshot cursor would let retention
#: delete ledgers of topics that have no subscription yet.
SOURCE_NS = "public/nodedup"


def source_options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url, **extra}


def position_of(message_id: Any) -> dict[str, int]:
    return MessagePosition.normalised(message_id.ledger_id(), message_id.entry_id(),
                                      message_id.batch_index()).to_json()


def test_batch_read_of_a_partitioned_topic(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    topic = new_topic("batch", SOURCE_NS)
    admin.create_partitioned(topic, 3)
    client = client_for(broker.service_url)
    values = [f"v{i}".encode() for i in range(300)]
    ids = produce(client, topic, values, keys=lambda i: f"k{i}",
                  properties=lambda i: {"i": str(i)} if i % 2 == 0 else None,
                  event_times=lambda i: 1_700_000_000_000 + i if i % 3 == 0 else None)
    client.close()

    df = spark.read.format("magnetar").options(**source_options(broker, topic=topic)).load()
    assert df.schema == SOURCE_SCHEMA
    assert {m.partition() for m in ids} == {0, 1, 2}
    assert df.rdd.getNumPartitions() == 3  # one Spark partition per topic partition
    rows = {r.value: r for r in df.collect()}
    assert len(rows) == 300 and set(rows) == set(values)
    for i, value in enumerate(values):
        row = rows[value]
        assert row["__key"] == f"k{i}"
        assert row["__messageProperties"] == ({"i": str(i)} if i % 2 == 0 else {})
        if i % 3 == 0:
            assert int(row["__eventTime"].timestamp() * 1000) == 1_700_000_000_000 + i
        else:
            assert row["__eventTime"] is None
        assert row["__topic"] == f"{topic}-partition-{ids[i].partition()}"
        assert pulsar.MessageId.deserialize(row["__messageId"]) == ids[i]
        assert row["__publishTime"] is not None and row["__producerName"]
        assert row["__redeliveryCount"] == 0

    # Planning asked the admin API for the last message ids: no subscription was created.
    assert all(admin.get(f"{topic}-partition-{i}", "subscriptions") == [] for i in range(3))

    # A sub-range of one partition: exclusive start, inclusive end, in both offset spellings.
    part0 = sorted((m for m in ids if m.partition() == 0), key=lambda m: (m.ledger_id(), m.entry_id(),
                                                                          m.batch_index()))
    start, end = part0[9], part0[29]
    ranged = (spark.read.format("magnetar")
              .options(**source_options(broker, topic=topic))
              .option("startingOffsets", json.dumps({f"{topic}-partition-0": position_of(start)}))
              .option("endingOffsets", json.dumps({
                  f"{topic}-partition-0": f"{end.ledger_id()}:{end.entry_id()}:{end.batch_index()}",
                  f"{topic}-partition-1": "earliest", f"{topic}-partition-2": "earliest"}))
              .load())
    got = sorted(ranged.select("__messageId").collect(), key=lambda r: pulsar.MessageId.deserialize(r[0]))
    assert [pulsar.MessageId.deserialize(r[0]) for r in got] == part0[10:30]

    # Large ranges are split into several tasks without changing what is read.
    split = spark.read.format("magnetar").options(**source_options(broker, topic=topic,
                                                                   maxEntriesPerSplit="2")).load()
    assert split.rdd.getNumPartitions() > 3
    assert sorted(r.value for r in split.select("value").collect()) == sorted(values)


def test_topics_pattern_and_starting_time(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    admin.create_namespace("public/pattern")
    first, second = new_topic("evt", "public/pattern"), new_topic("evt", "public/pattern")
    other = new_topic("other", "public/pattern")
    client = client_for(broker.service_url)
    produce(client, first, [b"a0", b"a1"])
    produce(client, other, [b"x"])
    produce(client, second, [b"b0"])
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, first, [b"a2"])
    produce(client, second, [b"b1", b"b2"])
    client.close()

    pattern = source_options(broker, topicsPattern="persistent://public/pattern/evt-.*")
    df = spark.read.format("magnetar").options(**pattern).load()
    assert sorted(r.value for r in df.collect()) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]
    late = spark.read.format("magnetar").options(**pattern, startingTime=str(middle_ms)).load()
    assert sorted(r.value for r in late.collect()) == [b"a2", b"b1", b"b2"]
    nothing = spark.read.format("magnetar").options(**pattern, startingOffsets="latest").load()
    assert nothing.count() == 0


def _fail_on(marker: str, poison: bytes) -> Any:
    """A UDF passing values through, failing every attempt on ``poison`` while ``marker`` exists."""
    def check(value: bytes) -> bytes:
        if value == poison and os.path.exists(marker):
            raise RuntimeError(f"injected failure on {poison!r}")
        return value
    return F.udf(check, BinaryType(), useArrow=False)


def test_stream_replays_a_crashed_batch_and_resumes_from_checkpoint(
        spark: SparkSession, broker: BrokerProcess, admin: Admin, tmp_path: Path) -> None:
    topic = new_topic("stream", SOURCE_NS)
    admin.create_partitioned(topic, 2)
    client = client_for(broker.service_url)
    produce(client, topic, [f"v{i}".encode() for i in range(100)])
    out, checkpoint, marker = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "fail"
    marker.touch()
    crash = _fail_on(str(marker), b"v50")

    def run() -> None:
        stream = (spark.readStream.format("magnetar")
                  .options(**source_options(broker, topic=topic, startingOffsets="earliest")).load())
        query = (stream.select(crash("value").alias("value")).writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    with pytest.raises(Exception, match="injected failure"):
        run()
    marker.unlink()
    run()
    assert sorted(r.value for r in spark.read.parquet(str(out)).collect()) == \
        sorted(f"v{i}".encode() for i in range(100))

    produce(client, topic, [f"v{i}".encode() for i in range(100, 150)])
    client.close()
    run()
    assert sorted(r.value for r in spark.read.parquet(str(out)).collect()) == \
        sorted(f"v{i}".encode() for i in range(150))


def test_max_records_per_trigger(spark: SparkSession, broker: BrokerProcess, admin: Admin,
                                 tmp_path: Path) -> None:
    topic = new_topic("limit", SOURCE_NS)
    admin.create_partitioned(topic, 2)
    client = client_for(broker.service_url)
    produce(client, topic, [f"v{i}".encode() for i in range(250)])
    client.close()
    stream = (spark.readStream.format("magnetar")
              .options(**source_options(broker, topic=topic, startingOffsets="earliest",
                                        maxRecordsPerTrigger="100")).load())
    query = (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(rows) == 250
    assert max(rows) <= 100 and len(rows) >= 3


def test_fail_on_data_loss_both_ways(spark: SparkSession, broker: BrokerProcess, admin: Admin) -> None:
    topic = new_topic("loss", SOURCE_NS)
    admin.create_topic(topic)
    client = client_for(broker.service_url)
    ids = produce(client, topic, [f"v{i}".encode() for i in range(5 * LEDGER_ENTRIES)], batching=False)
    # A subscription acknowledges the first three ledgers; retention (none on this topic) then deletes them.
    resp = admin.http.post(f"/{admin.path(topic)}/retention", json={"retentionTimeInMinutes": 0,
                                                                   "retentionSizeInMB": 0})
    assert resp.status_code == 204, resp.text
    consumer = client.subscribe(topic, "eater", initial_position=pulsar.InitialPosition.Earliest)
    consumer.acknowledge_cumulative(ids[3 * LEDGER_ENTRIES - 1])
    wait_until(lambda: admin.get(topic, "internalStats")["ledgers"][0]["ledgerId"] > ids[0].ledger_id()
               and len(admin.get(topic, "internalStats")["ledgers"]) <= 3, what="ledgers trimmed")
    consumer.close()
    client.close()

    needs_lost = json.dumps({topic: position_of(ids[5])})
    strict = (spark.read.format("magnetar")
              .options(**source_options(broker, topic=topic, startingOffsets=needs_lost)).load())
    with pytest.raises(Exception, match="Data loss"):
        strict.collect()
    lenient = (spark.read.format("magnetar")
               .options(**source_options(broker, topic=topic, startingOffsets=needs_lost,
                                         failOnDataLoss="false")).load())
    remaining = [f"v{i}".encode() for i in range(3 * LEDGER_ENTRIES, 5 * LEDGER_ENTRIES)]
    assert sorted(r.value for r in lenient.collect()) == sorted(remaining)
    # Reading from what is left is no loss at all.
    kept = json.dumps({topic: position_of(ids[3 * LEDGER_ENTRIES + 4])})
    fine = spark.read.format("magnetar").options(**source_options(broker, topic=topic,
                                                                  startingOffsets=kept)).load()
    assert fine.count() == 2 * LEDGER_ENTRIES - 5


def test_progress_subscription_follows_committed_offsets(spark: SparkSession, broker: BrokerProcess,
                                                         admin: Admin, tmp_path: Path) -> None:
    topic = new_topic("progress", SOURCE_NS)
    admin.create_partitioned(topic, 2)
    client = client_for(broker.service_url)
    produce(client, topic, [f"v{i}".encode() for i in range(40)], batching=False)

    def backlog() -> int:
        stats = admin.get(topic, "partitioned-stats")
        return int(stats["subscriptions"]["progress"]["msgBacklog"])

    def run() -> None:
        stream = (spark.readStream.format("magnetar")
                  .options(**source_options(broker, topic=topic, startingOffsets="earliest",
                                            subscriptionName="progress")).load())
        query = (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    # The last message processed stays in each partition's backlog (it anchors data-loss checks).
    assert backlog() == 2
    produce(client, topic, [f"w{i}".encode() for i in range(30)], batching=False)
    client.close()
    assert backlog() == 32
    run()
    assert backlog() == 2
