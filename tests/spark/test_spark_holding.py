"""A streaming query holds what it has not committed: its durable subscriptions, their names and
positions, their removal, and the issue's reproduction (a driver killed after three batches on a
topic that keeps nothing once consumed, then restarted: no hang, no loss)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_helpers import LEDGER_ENTRIES, Admin, client_for, new_topic, produce, wait_until

from magnetar.cli.spark_admin import checkpointed_subscriptions
from magnetar.spark.offsets import SourceOffset
from magnetar.spark.options import parse_source_options
from magnetar.spark.source import MagnetarStreamReader
from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
SOURCE_NS = "public/nodedup"
DRIVER = Path(__file__).with_name("parquet_driver.py")


def source_options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.web_url, **extra}


def retain_nothing(admin: Admin, topic: str) -> None:
    resp = admin.http.post(f"/{admin.path(topic)}/retention", json={"retentionTimeInMinutes": 0,
                                                                   "retentionSizeInMB": 0})
    assert resp.status_code == 204, resp.text


def held(admin: Admin, partition: str) -> dict[str, int]:
    """Subscription name -> backlog on one topic partition."""
    subs = admin.get(partition, "stats")["subscriptions"]
    return {name: int(sub["msgBacklog"]) for name, sub in subs.items()}


def magnetar_cli(broker: BrokerProcess, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", broker.web_url, *args],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def test_subscription_is_created_at_the_start_and_moves_only_on_commit(broker: BrokerProcess,
                                                                         admin: Admin) -> None:
    """The reader's calls in Spark's order, without Spark: what each one does to the subscription."""
    topic = new_topic("hold", SOURCE_NS)
    admin.create_topic(topic)
    client = client_for(broker.service_url)
    produce(client, topic, [f"v{i}".encode() for i in range(30)], batching=False)
    reader = MagnetarStreamReader(parse_source_options(source_options(broker, topic=topic,
                                                                      startingOffsets="earliest"), streaming=True))
    start = reader.initialOffset()
    name = start["subscription"]
    assert name.startswith("magnetar-spark-") and held(admin, topic) == {name: 30}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert SourceOffset.from_json(end).subscription == name
    reader.partitions(start, end)
    assert held(admin, topic) == {name: 30}, "planning must not move the subscription"
    reader.commit(end)
    assert held(admin, topic) == {name: 1}  # the last message committed stays, anchoring the next check

    # A restarted driver (a new reader) finds the subscription through the checkpointed offsets.
    produce(client, topic, [f"w{i}".encode() for i in range(5)], batching=False)
    client.close()
    restarted = MagnetarStreamReader(parse_source_options(source_options(broker, topic=topic), streaming=True))
    later = restarted.latestOffset(end, ReadAllAvailable())
    assert SourceOffset.from_json(later).subscription == name and held(admin, topic) == {name: 6}
    restarted.commit(later)
    assert held(admin, topic) == {name: 1}

    named = MagnetarStreamReader(parse_source_options(
        source_options(broker, topic=topic, startingOffsets="latest", subscriptionName="mine"), streaming=True))
    assert named.initialOffset()["subscription"] == "mine" and held(admin, topic) == {name: 1, "mine": 1}


@pytest.mark.timeout(400)
def test_stream_holds_uncommitted_data_against_retention_and_is_retired(
        spark: SparkSession, broker: BrokerProcess, admin: Admin, tmp_path: Path) -> None:
    topic = new_topic("held", SOURCE_NS)
    admin.create_partitioned(topic, 2)
    partitions = [f"{topic}-partition-{i}" for i in range(2)]
    client = client_for(broker.service_url)
    produce(client, topic, [f"a{i}".encode() for i in range(60)], batching=False)
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def run() -> Any:
        stream = (spark.readStream.format("magnetar")
                  .options(**source_options(broker, topic=topic, startingOffsets="earliest",
                                            maxRecordsPerTrigger="25")).load())
        query = (stream.select("value").writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the query did not end"
        return query

    run()
    [query] = checkpointed_subscriptions(checkpoint)
    assert query.topics == tuple(partitions)
    assert all(held(admin, p) == {query.name: 1} for p in partitions)

    # Retention now keeps nothing consumed: only the query's subscriptions hold the new messages.
    retain_nothing(admin, topic)
    ids = produce(client, topic, [f"b{i}".encode() for i in range(10 * LEDGER_ENTRIES)], batching=False)
    client.close()
    first_ids = {p: min(m.ledger_id() for m in ids if m.partition() == i) for i, p in enumerate(partitions)}
    # Retention ran: the ledgers before each subscription's (earlier than any new message) are gone.
    wait_until(lambda: all(int(admin.get(p, "internalStats")["ledgers"][0]["ledgerId"]) >= first_ids[p] - 1
                           for p in partitions), what="retention to delete what the query committed")
    run()
    got = sorted(r.value for r in spark.read.parquet(str(out)).collect())
    assert got == sorted([f"a{i}".encode() for i in range(60)] + [f"b{i}".encode() for i in range(10 * LEDGER_ENTRIES)])

    listed = magnetar_cli(broker, "spark", "subscriptions", str(checkpoint))
    assert query.name in listed and partitions[0] in listed and partitions[1] in listed
    removed = magnetar_cli(broker, "spark", "remove-subscriptions", str(checkpoint))
    assert removed.count(f"Deleted subscription {query.name}") == 2
    assert all(held(admin, p) == {} for p in partitions)
    assert "already removed" in magnetar_cli(broker, "spark", "remove-subscriptions", str(checkpoint))


def test_cli_refuses_what_is_not_a_checkpoint(broker: BrokerProcess, tmp_path: Path) -> None:
    for folder, said in ((tmp_path / "missing", "has no offsets/ folder"),
                         (tmp_path, "has no offsets/ folder")):
        result = subprocess.run([sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", broker.web_url,
                                 "spark", "remove-subscriptions", str(folder)], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 1 and said in result.stderr, result.stderr
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps({"other": 1}) + "\n")
    with pytest.raises(ValueError, match="name no Magnetar subscription"):
        checkpointed_subscriptions(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_issue_driver_killed_after_three_batches_restarts_without_hang_or_loss(
        spark: SparkSession, broker: BrokerProcess, admin: Admin, tmp_path: Path) -> None:
    """From the issue: topic -> Parquet, maxRecordsPerTrigger, a checkpoint, a topic that keeps
    nothing once consumed; the driver SIGKILLed after three batches and started again."""
    topic = new_topic("issue", SOURCE_NS)
    admin.create_partitioned(topic, 2)
    retain_nothing(admin, topic)
    client = client_for(broker.service_url)
    expected = [b"row-%06d-" % i + b"x" * 89 for i in range(40_000)]
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def driver(mode: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(DRIVER), broker.service_url, broker.web_url, topic, str(out),
                                 str(checkpoint), mode, "5000"], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    running = driver("run")
    try:
        # The query starts on the empty topic; its subscriptions hold everything produced after.
        wait_until(lambda: all(held(admin, f"{topic}-partition-{i}") for i in range(2)), timeout_s=240,
                   what="the query's subscriptions")
        produce(client, topic, expected)
        wait_until(lambda: (checkpoint / "commits" / "3").exists(), timeout_s=240, what="three batches")
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.wait()
    client.close()
    assert not (checkpoint / "commits" / "8").exists(), "the query should be killed before it read everything"
    drain = driver("drain")
    try:
        assert drain.wait(timeout=300) == 0
    finally:
        if drain.poll() is None:
            os.killpg(drain.pid, signal.SIGKILL)
    # The Parquet sink's log (_spark_metadata) names the files of committed batches only.
    got = [r.value for r in spark.read.parquet(str(out)).collect()]
    assert len(got) == len(expected) and sorted(got) == sorted(expected)
