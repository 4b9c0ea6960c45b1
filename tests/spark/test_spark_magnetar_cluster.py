"""The source and the sink against a Magnetar cluster: two ``magnetar broker`` processes over one
ZooKeeper and one data directory, a partitioned topic whose partitions different brokers own.

Spark is given one broker's URLs; every executor reaches each partition's owner through
lookups (binary protocol) and 307 redirects (admin REST). A broker killed under a running
streaming query costs the tasks that were reading from it a retry (their reads look up the
new owner once the killed broker's session has ended), never a lost or duplicated row.
Slow (some 50 s a test): run with ``bin/test -m slow tests/spark/test_spark_magnetar_cluster.py``.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_helpers import wait_until

from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.testing.zookeeper_process import ZooKeeperProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from cluster_helpers import Cluster, start_cluster  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]
PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path_factory.mktemp("spark-cluster") / "data",
                            config={"brokerDeduplicationEnabled": "true"})
    yield running
    running.stop()


def spread_topic(cluster: Cluster) -> tuple[str, list[str]]:
    """A new partitioned topic whose partitions fall in every bundle of public/default, so
    that both brokers own some of them once they are looked up."""
    bundles = NamespaceBundles("public/default")
    prefix = uuid.uuid4().hex[:8]
    for i in range(10_000):
        topic = f"persistent://public/default/spark-{prefix}-{i}"
        partitions = [f"{topic}-partition-{p}" for p in range(PARTITIONS)]
        if len({bundles.find_bundle(p).range_name for p in partitions}) == len(bundles):
            break
    resp = httpx.put(f"{cluster.brokers[0].web_url}/admin/v2/{topic.replace('://', '/', 1)}/partitions",
                     json=PARTITIONS, timeout=30)
    assert resp.status_code == 204, resp.text
    return topic, partitions


def options(cluster: Cluster, index: int, topic: str, **extra: str) -> dict[str, str]:
    broker = cluster.brokers[index]
    return {"service.url": broker.service_url, "admin.url": broker.web_url, "topic": topic, **extra}


def rows(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(count, numPartitions=4).select(F.format_string("v%06d", "id").cast("binary").alias("value"))


def expected(count: int) -> list[bytes]:
    return [b"v%06d" % i for i in range(count)]


def values(df: DataFrame) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


def owners(cluster: Cluster, partitions: list[str]) -> dict[str, str | None]:
    return {p: cluster.owner_of(p) for p in partitions}


@pytest.mark.timeout(300)
def test_partitions_of_two_brokers_are_written_and_read_through_lookups(
        spark: SparkSession, cluster: Cluster, tmp_path: Path) -> None:
    topic, partitions = spread_topic(cluster)
    rows(spark, 2000).write.format("magnetar").options(**options(cluster, 0, topic)).mode("append").save()
    owned = owners(cluster, partitions)
    assert set(owned.values()) == {cluster.broker_id(b) for b in cluster.brokers}, owned

    # Read through the other broker: every partition has its share, from whichever broker owns it.
    df = spark.read.format("magnetar").options(**options(cluster, 1, topic)).load()
    assert values(df) == expected(2000)
    per_partition = {r["__topic"]: r["count"] for r in df.groupBy("__topic").count().collect()}
    assert sorted(per_partition) == partitions and min(per_partition.values()) > 0, per_partition

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    query = (spark.readStream.format("magnetar").options(**options(cluster, 1, topic, startingOffsets="earliest"))
             .load().select("value").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert values(spark.read.parquet(str(out))) == expected(2000)


def _read_so_far(spark: SparkSession, out: Path) -> int:
    try:
        return spark.read.parquet(str(out)).count()
    except Exception:  # nothing committed yet
        return 0


@pytest.mark.timeout(400)
def test_a_broker_killed_under_a_streaming_query_costs_a_retry_not_a_row(
        spark: SparkSession, cluster: Cluster, tmp_path: Path) -> None:
    total = 20_000
    topic, partitions = spread_topic(cluster)
    rows(spark, total).write.format("magnetar").options(**options(cluster, 0, topic)).mode("append").save()
    survivor, victim = cluster.brokers
    owned = owners(cluster, partitions)
    on_victim = [p for p, owner in owned.items() if owner == cluster.broker_id(victim)]
    assert on_victim and len(on_victim) < PARTITIONS, owned

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    query: Any = (spark.readStream.format("magnetar")
                  .options(**options(cluster, 0, topic, startingOffsets="earliest", maxRecordsPerTrigger="1000"))
                  .load().select("value").writeStream.format("parquet").option("path", str(out))
                  .option("checkpointLocation", str(checkpoint)).start())
    try:
        wait_until(lambda: _read_so_far(spark, out) >= 3000, timeout_s=120, what="three batches")
        assert victim.proc is not None
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(30)
        read_at_kill = _read_so_far(spark, out)
        assert read_at_kill < total, "the query had read everything before the kill"
        wait_until(lambda: _read_so_far(spark, out) >= total or not query.isActive, timeout_s=180,
                   what="the query to read every row")
        assert query.isActive and query.exception() is None, query.exception()
        # the killed broker's partitions are served by the survivor now
        assert set(owners(cluster, on_victim).values()) == {cluster.broker_id(survivor)}
    finally:
        query.stop()
    assert values(spark.read.parquet(str(out))) == expected(total)
