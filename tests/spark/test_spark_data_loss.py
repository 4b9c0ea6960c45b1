"""failOnDataLoss and bounded waits against a real broker: data trimmed by retention under a
streaming query (both settings), a topic deleted under a running query, a broker that stops
answering in the middle of a read, and the planning walk over a topic whose messages are gone."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession
from spark_helpers import LEDGER_ENTRIES, Admin, client_for, new_topic, produce, read_values, wait_until

from magnetar.spark.admission import BacklogWalker, BacklogWalkTimeout
from magnetar.spark.data_loss import DataLossCheck, MagnetarDataLossError, ReadableStart
from magnetar.spark.offsets import EARLIEST, MessagePosition
from magnetar.spark.options import parse_source_options
from magnetar.spark.rest import AdminClient
from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
SOURCE_NS = "public/nodedup"


def source_options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url, **extra}


def retain_nothing(admin: Admin, topic: str) -> None:
    resp = admin.http.post(f"/{admin.path(topic)}/retention", json={"retentionTimeInMinutes": 0,
                                                                   "retentionSizeInMB": 0})
    assert resp.status_code == 204, resp.text


def first_ledger(admin: Admin, topic: str) -> int:
    return int(admin.get(topic, "internalStats")["ledgers"][0]["ledgerId"])


def trimmed_topic(broker: BrokerProcess, admin: Admin, messages: int) -> tuple[str, list[Any]]:
    """A topic without subscriptions or retention whose full ledgers retention has deleted."""
    topic = new_topic("trimmed", SOURCE_NS)
    admin.create_topic(topic)
    retain_nothing(admin, topic)
    client = client_for(broker.service_url)
    ids = produce(client, topic, [f"v{i}".encode() for i in range(messages)], batching=False)
    client.close()
    wait_until(lambda: first_ledger(admin, topic) > ids[-1].ledger_id() - (messages % LEDGER_ENTRIES > 0),
               what="retention to delete the full ledgers")
    return topic, ids


def test_driver_check_fails_or_warns_once_naming_topic_range_and_retention(
        broker: BrokerProcess, admin: Admin, caplog: pytest.LogCaptureFixture) -> None:
    topic, ids = trimmed_topic(broker, admin, 3 * LEDGER_ENTRIES + 5)
    start = MessagePosition(ids[3].ledger_id(), ids[3].entry_id())
    options = parse_source_options(source_options(broker, topic=topic), streaming=True)
    with AdminClient(options.connection) as client:
        with pytest.raises(MagnetarDataLossError) as failed:
            DataLossCheck(True).readable_start(client, topic, start)
        text = str(failed.value)
        assert topic in text and f"after {start}" in text and f"ledger {start.ledger_id} was deleted" in text
        assert "retentionTimeInMinutes=0, retentionSizeInMB=0" in text and "failOnDataLoss=false" in text

        lenient = DataLossCheck(False)
        with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
            assert lenient.readable_start(client, topic, start) == ReadableStart.at(EARLIEST)
            assert lenient.readable_start(client, topic, start) == ReadableStart.at(EARLIEST)
        warnings = [r.getMessage() for r in caplog.records if r.name == "magnetar.spark"]
        assert len(warnings) == 1 and topic in warnings[0] and "retentionTimeInMinutes=0" in warnings[0]
        # A start whose ledger is still stored is no loss.
        kept = MessagePosition(ids[-1].ledger_id(), ids[-1].entry_id() - 1)
        assert DataLossCheck(True).readable_start(client, topic, kept) == ReadableStart.at(kept)


@pytest.mark.timeout(120)
def test_planning_walk_over_a_topic_whose_messages_are_gone_ends(broker: BrokerProcess, admin: Admin) -> None:
    """The issue's hang: every ledger trimmed, the last message id still reported, a Reader that
    reads nothing while ``has_message_available()`` stays true."""
    topic, ids = trimmed_topic(broker, admin, 5 * LEDGER_ENTRIES)
    options = parse_source_options(source_options(broker, topic=topic, pollTimeoutMs="3000"), streaming=True)
    last = MessagePosition(ids[-1].ledger_id(), ids[-1].entry_id())
    began = time.monotonic()
    with pytest.raises(BacklogWalkTimeout, match=f"planning the next micro-batch of {topic}: 3 reads"):
        BacklogWalker(options).advance({topic: EARLIEST}, {topic: last}, 100)
    assert time.monotonic() - began < 30
    # The driver plans nothing there: the range up to the last message has nothing left to read.
    with AdminClient(options.connection) as client:
        assert DataLossCheck(True).readable_start(client, topic, EARLIEST) == ReadableStart(EARLIEST, last)


def test_topic_deleted_and_created_again_between_two_plannings(broker: BrokerProcess, admin: Admin,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """The reader's calls in Spark's order, without Spark: between two plannings the topic is
    deleted and made again, empty (as a producer's or a lookup's auto-creation would), so the
    query never sees it missing. Its last message id is then before what the query read: the
    strict query fails, the lenient one warns once and reads the new topic from its start."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from magnetar.spark.source import MagnetarStreamReader

    def planned(fail_on_data_loss: str) -> tuple[str, MagnetarStreamReader, dict[str, Any]]:
        topic = new_topic("recreated", SOURCE_NS)
        admin.create_topic(topic)
        client = client_for(broker.service_url)
        produce(client, topic, [b"x"] * 10, batching=False)
        client.close()
        reader = MagnetarStreamReader(parse_source_options(source_options(
            broker, topic=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss), streaming=True))
        end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        reader.commit(end)
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new: the start is checked
        resp = admin.http.delete(f"/{admin.path(topic)}", params={"force": "true"})
        assert resp.status_code == 204, resp.text
        admin.create_topic(topic)
        return topic, reader, end

    topic, strict, end = planned("true")
    with pytest.raises(MagnetarDataLossError) as failed:
        strict.latestOffset(end, ReadAllAvailable())
    assert topic in str(failed.value) and "deleted and created again" in str(failed.value)
    assert "retentionTimeInMinutes=-1" in str(failed.value)

    topic, lenient, end = planned("false")
    with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
        assert lenient.latestOffset(end, ReadAllAvailable()) == end
        assert lenient.latestOffset(end, ReadAllAvailable()) == end
    warnings = [r.getMessage() for r in caplog.records if r.name == "magnetar.spark" and topic in r.getMessage()]
    assert len(warnings) == 1, warnings
    client = client_for(broker.service_url)
    produce(client, topic, [b"y"] * 4, batching=False)
    client.close()
    later = lenient.latestOffset(end, ReadAllAvailable())
    parts = lenient.partitions(end, later)
    assert len(parts) == 1 and parts[0].start == EARLIEST


def _run_available_now(spark: SparkSession, options: dict[str, str], out: Path, checkpoint: Path) -> Any:
    stream = spark.readStream.format("magnetar").options(**options).load()
    query = (stream.select("value").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(100), "the query did not end"
    return query


@pytest.mark.timeout(400)
def test_stream_over_trimmed_data_fails_or_goes_on_from_what_is_stored(
        spark: SparkSession, broker: BrokerProcess, admin: Admin, tmp_path: Path) -> None:
    topic = new_topic("gone", SOURCE_NS)
    admin.create_topic(topic)
    client = client_for(broker.service_url)
    produce(client, topic, [f"a{i}".encode() for i in range(2 * LEDGER_ENTRIES)], batching=False)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    options = source_options(broker, topic=topic, startingOffsets="earliest")
    _run_available_now(spark, options, out, checkpoint)
    retain_nothing(admin, topic)
    held = admin.get(topic, "stats")["subscriptions"]
    assert len(held) == 1, held
    name = next(iter(held))
    # What the query has not read yet is held by its subscription; here it is skipped for it, as
    # message TTL would, so retention deletes it before the query comes back.
    ids = produce(client, topic, [f"b{i}".encode() for i in range(3 * LEDGER_ENTRIES + 7)], batching=False)
    resp = admin.http.post(f"/{admin.path(topic)}/subscription/{name}/skip_all")
    assert resp.status_code == 204, resp.text
    wait_until(lambda: first_ledger(admin, topic) == ids[-1].ledger_id(), what="retention to trim")

    with pytest.raises(Exception, match="Data loss") as failed:
        _run_available_now(spark, options, out, checkpoint)
    assert topic in str(failed.value) and "retentionTimeInMinutes=0, retentionSizeInMB=0" in str(failed.value)

    _run_available_now(spark, {**options, "failOnDataLoss": "false"}, out, checkpoint)
    stored = read_values(client, topic)
    client.close()
    assert stored == [f"b{i}".encode() for i in range(3 * LEDGER_ENTRIES, 3 * LEDGER_ENTRIES + 7)]
    values = sorted(r.value for r in spark.read.parquet(str(out)).collect())
    assert values == sorted([f"a{i}".encode() for i in range(2 * LEDGER_ENTRIES)] + stored)


@pytest.mark.timeout(300)
def test_topic_deleted_under_a_running_query(spark: SparkSession, broker: BrokerProcess, admin: Admin,
                                             tmp_path: Path) -> None:
    def start(topic: str, name: str, **extra: str) -> Any:
        stream = (spark.readStream.format("magnetar")
                  .options(**source_options(broker, topic=topic, startingOffsets="earliest", **extra)).load())
        return (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / name))
                .trigger(processingTime="200 milliseconds").start())

    client = client_for(broker.service_url)
    topics = [new_topic("deleted", SOURCE_NS) for _ in range(2)]
    for topic in topics:
        admin.create_topic(topic)
        produce(client, topic, [b"x"] * 10, batching=False)
    client.close()
    strict, lenient = start(topics[0], "strict"), start(topics[1], "lenient", failOnDataLoss="false")
    try:
        for query in (strict, lenient):
            wait_until(lambda q=query: any(p["numInputRows"] == 10 for p in q.recentProgress), timeout_s=120,
                       what="the first batch")
        for topic in topics:
            resp = admin.http.delete(f"/{admin.path(topic)}", params={"force": "true"})
            assert resp.status_code == 204, resp.text
        with pytest.raises(Exception, match="Data loss") as failed:
            strict.awaitTermination(60)
        error = str(failed.value)
        assert topics[0] in error and "no longer exists" in error and "after" in error
        assert "retentionTimeInMinutes=-1, retentionSizeInMB=-1" in error  # the test broker's defaults
        # The lenient query goes on; when its topic comes back it reads it from its first message.
        client = client_for(broker.service_url)
        admin.create_topic(topics[1])
        produce(client, topics[1], [b"y"] * 4, batching=False)
        client.close()
        # The four may come in more than one micro-batch: a trigger can fall between two sends.
        wait_until(lambda: sum(p["numInputRows"] for p in lenient.recentProgress) == 10 + 4, timeout_s=60,
                   what="the lenient query to read the topic created again")
        assert lenient.isActive and lenient.exception() is None
    finally:
        strict.stop()
        lenient.stop()


def _stop_once_reading(broker: BrokerProcess, topic: str, stopped: threading.Event) -> None:
    """SIGSTOP the broker as soon as its stats show messages going out to the task's reader."""
    assert broker.proc is not None
    with httpx.Client(base_url=f"{broker.web_url}/admin/v2", timeout=5) as http:
        while not stopped.is_set():
            resp = http.get(f"/{topic.replace('://', '/', 1)}/stats")
            if resp.status_code == 200 and resp.json().get("msgOutCounter", 0) > 0:
                os.kill(broker.proc.pid, signal.SIGSTOP)
                stopped.set()
            time.sleep(0.01)


@pytest.mark.timeout(300)
def test_broker_that_stops_answering_mid_read_fails_the_query_in_bounded_time(
        spark: SparkSession, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"allowAutoTopicCreationType": "non-partitioned"}).start(120)
    stopped = threading.Event()
    try:
        topic = new_topic("stopped")
        client = client_for(broker.service_url)
        produce(client, topic, [b"v%05d" % i for i in range(20_000)])
        client.close()
        # A queue of two: the task asks the broker for every entry (50 messages) as it goes.
        df = (spark.read.format("magnetar")
              .options(**source_options(broker, topic=topic, pollTimeoutMs="2000",
                                        **{"pulsar.client.operationTimeoutMs": "2000",
                                           "pulsar.reader.receiverQueueSize": "2"})).load())
        watcher = threading.Thread(target=_stop_once_reading, args=(broker, topic, stopped), daemon=True)
        watcher.start()
        began = time.monotonic()
        with pytest.raises(Exception, match=r"within 2s|pollTimeoutMs=2000"):
            df.count()
        assert stopped.is_set() and time.monotonic() - began < 90
    finally:
        stopped.set()
        if broker.proc is not None:
            os.kill(broker.proc.pid, signal.SIGCONT)
        broker.kill()
