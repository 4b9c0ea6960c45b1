"""Spark through Magnetar end to end: write then read N messages (binary of S bytes, or AVRO); prints, per
phase, rows/s and CPU seconds per million rows on the Spark side and the broker side, as JSON.

A broker process and a local Spark session share the machine, as in the issue's
set-up. The write goes through the effectively-once sink (deduplication on), the
read through the batch source into Spark's ``noop`` sink, so every row is
materialised in the JVM. With ``--avro`` the topic has an AVRO schema of five fields
(long, string, double, boolean, timestamp-millis): the sink encodes each row with it and
the source decodes it into five typed columns.

Usage: python bench/spark_bench.py [--rows 1000000] [--size 100] [--partitions 2] [--master local[2]] [--avro]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from magnetar.testing.broker_process import BrokerProcess


def cpu_seconds(root_pid: int) -> float:
    """CPU time (user + system, reaped children included) of a process and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / ticks
    total, stack = 0.0, [root_pid]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


#: The ``--avro`` topic's schema.
AVRO_RECORD = {"type": "record", "name": "BenchRow", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def upload_schema(web_url: str, topic_path: str, record: dict[str, object]) -> None:
    import httpx
    resp = httpx.post(f"{web_url}/admin/v2/schemas/{topic_path}/schema",
                      json={"type": "AVRO", "schema": json.dumps(record)}, timeout=30)
    resp.raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (= Spark tasks)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-fsync", action="store_true", help="broker journalSyncData=false")
    parser.add_argument("--avro", action="store_true", help="an AVRO topic of five fields instead of binary rows")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from magnetar.spark import MagnetarDataSource

    with tempfile.TemporaryDirectory() as tmp:
        config = {"brokerDeduplicationEnabled": "true", "allowAutoTopicCreationType": "partitioned",
                  "defaultNumPartitions": str(args.partitions),
                  "journalSyncData": "false" if args.no_fsync else "true"}
        broker = BrokerProcess(Path(tmp) / "data", config).start()
        try:
            spark = (SparkSession.builder.master(args.master).appName("magnetar-spark-bench")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.shuffle.partitions", str(args.partitions)).getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(MagnetarDataSource)
            options = {"service.url": broker.service_url, "admin.url": broker.web_url,
                       "topic": "persistent://public/default/spark-bench"}
            # Warm up: start the Python workers and import the client, off the clock.
            warm = {**options, "topic": "persistent://public/default/spark-bench-warm-up"}
            spark.range(1000, numPartitions=args.partitions).select(F.col("id").cast("string").alias("value")) \
                .write.format("magnetar").options(**warm).mode("append").save()
            spark.read.format("magnetar").options(**warm).load().write.format("noop").mode("overwrite").save()

            assert broker.proc is not None
            me, broker_pid = os.getpid(), broker.proc.pid
            if args.avro:
                upload_schema(broker.web_url, "public/default/spark-bench", AVRO_RECORD)
                rows = spark.range(args.rows, numPartitions=args.partitions).select(
                    F.col("id"), F.concat(F.lit("user-"), F.col("id").cast("string")).alias("name"),
                    (F.col("id") / 7).alias("score"), (F.col("id") % 2 == 0).alias("ok"),
                    F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("at"))
            else:
                rows = (spark.range(args.rows, numPartitions=args.partitions)
                        .select(F.lpad(F.col("id").cast("string"), args.size, "x").cast("binary").alias("value")))
            cpu = (cpu_seconds(me), cpu_seconds(broker_pid))
            started = time.perf_counter()
            rows.write.format("magnetar").options(**options).mode("append").save()
            write_s = time.perf_counter() - started
            write_cpu = (cpu_seconds(me) - cpu[0], cpu_seconds(broker_pid) - cpu[1])

            cpu = (cpu_seconds(me), cpu_seconds(broker_pid))
            started = time.perf_counter()
            read = spark.read.format("magnetar").options(**options).load()
            read.write.format("noop").mode("overwrite").save()
            read_s = time.perf_counter() - started
            read_cpu = (cpu_seconds(me) - cpu[0], cpu_seconds(broker_pid) - cpu[1])
            counted = spark.read.format("magnetar").options(**options).load().count()
            spark.stop()
        finally:
            broker.kill()

    base = {"rows": args.rows, "size_bytes": None if args.avro else args.size,
            "schema": "AVRO, 5 fields" if args.avro else "none (binary value)", "partitions": args.partitions,
            "master": args.master,
            "fsync": not args.no_fsync, "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}
    for phase, seconds, (spark_cpu, broker_cpu), extra in (
            ("write", write_s, write_cpu, {}), ("read", read_s, read_cpu, {"rows_read": counted})):
        # CPU seconds make runs comparable on a busy machine: rows per CPU-second of Spark
        # (driver, executors, Python workers) and of the broker.
        print(json.dumps({"phase": phase, **base, "seconds": round(seconds, 2),
                          "rows_per_s": round(args.rows / seconds), "spark_cpu_s": round(spark_cpu, 1),
                          "broker_cpu_s": round(broker_cpu, 1),
                          "spark_cpu_s_per_million_rows": round(spark_cpu * 1e6 / args.rows, 2),
                          "broker_cpu_s_per_million_rows": round(broker_cpu * 1e6 / args.rows, 2),
                          "rows_per_cpu_s": round(args.rows / max(spark_cpu + broker_cpu, 1e-9)), **extra}),
              flush=True)
    if counted != args.rows:
        raise SystemExit(f"read {counted} rows, wrote {args.rows}")


if __name__ == "__main__":
    main()
