"""Spark through Magnetar end to end: write then read N messages (binary of S bytes, or AVRO); prints, per
phase, rows/s and CPU seconds per million rows on the Spark side and the broker side, as JSON.

A broker process and a local Spark session share the machine, as in the issue's
set-up. The write goes through the effectively-once sink (deduplication on), the
read through the batch source into Spark's ``noop`` sink, so every row is
materialised in the JVM; ``stream_read`` reads the same rows again with a streaming query
(``availableNow``, a checkpoint) into ``noop``, the query's durable subscriptions created at
its start and moved as its batches commit. With ``--avro`` the topic has an AVRO schema of five fields
(long, string, double, boolean, timestamp-millis): the sink encodes each row with it and
the source decodes it into five typed columns. Both run first with ``--warm-up-rows``
rows on another topic, off the clock; ``--warm-up-rows 1000`` gives cold-JVM figures.

Usage: python bench/spark_bench.py [--rows 1000000] [--size 100] [--partitions 2] [--master local[2]] [--avro]
       [--warm-up-rows 200000] [--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.testing.broker_process import BrokerProcess

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Enough rows for the JVM to compile the hot paths of the measured queries before they run.
WARM_UP_ROWS = 200_000


def cpu_seconds(root_pid: int, skip_pid: int | None = None) -> dict[str, float]:
    """CPU time (user + system) of a process and its descendants but ``skip_pid``'s tree, by
    kind: the ``driver`` (the root), the Spark ``jvm``, and the ``python_workers`` the JVM
    starts (live ones, and the reaped ones the JVM or the worker daemon has waited for)."""
    ticks = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        procs[int(entry)] = (int(fields[1]), name,
                             (int(fields[11]) + int(fields[12])) / ticks, (int(fields[13]) + int(fields[14])) / ticks)
    children: dict[int, list[int]] = {}
    for pid, (parent, *_) in procs.items():
        children.setdefault(parent, []).append(pid)
    totals = dict.fromkeys(CPU_KINDS, 0.0)
    stack = [(root_pid, "driver")]
    while stack:
        pid, kind = stack.pop()
        if pid not in procs or pid == skip_pid:
            continue
        _, name, own, reaped = procs[pid]
        kind = "jvm" if name == "java" else "python_workers" if kind != "driver" else kind
        totals[kind] += own
        totals["python_workers" if kind != "driver" else kind] += reaped
        stack.extend((child, kind) for child in children.get(pid, ()))
    return totals


CPU_KINDS = ("driver", "jvm", "python_workers")


def measured(phase: Callable[[], None], spark_pid: int,
             broker_pid: int) -> tuple[float, dict[str, float], float, float]:
    """Run ``phase``: its wall seconds, Spark's CPU seconds by process kind, the broker's, and
    the machine's load average (1 minute) when it started: others' work slows a phase down."""
    load = os.getloadavg()[0]
    spark_before, broker_before = cpu_seconds(spark_pid, broker_pid), sum(cpu_seconds(broker_pid).values())
    started = time.perf_counter()
    phase()
    seconds = time.perf_counter() - started
    spark_after = cpu_seconds(spark_pid, broker_pid)
    return (seconds, {kind: spark_after[kind] - spark_before[kind] for kind in CPU_KINDS},
            sum(cpu_seconds(broker_pid).values()) - broker_before, load)


#: The ``--avro`` topic's schema.
AVRO_RECORD: dict[str, object] = {"type": "record", "name": "BenchRow", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def upload_schema(web_url: str, topic_path: str, record: dict[str, object]) -> None:
    import httpx
    resp = httpx.post(f"{web_url}/admin/v2/schemas/{topic_path}/schema",
                      json={"type": "AVRO", "schema": json.dumps(record)}, timeout=30)
    resp.raise_for_status()


#: What the session sets beyond the defaults, as a user would (see the README's benchmark
#: notes): the sink's input reaches Python in Arrow batches of
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, and unless
#: ``maxBytesPerBatch`` is Int.MaxValue Spark also sums the batch's byte size after every row.
SESSION_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str((1 << 31) - 1)}


def bench_rows(spark: SparkSession, count: int, args: argparse.Namespace) -> DataFrame:
    """The rows to write: AVRO's five fields, or the row number left-padded with ``x`` to
    ``--size`` bytes (what ``lpad`` gives, cut from a longer binary instead: ``lpad`` copies
    its padding a byte at a time, and the rows' making is not what the benchmark measures)."""
    from pyspark.sql import functions as F
    ids = spark.range(count, numPartitions=args.partitions)
    if args.avro:
        return ids.select(
            F.col("id"), F.concat(F.lit("user-"), F.col("id").cast("string")).alias("name"),
            (F.col("id") / 7).alias("score"), (F.col("id") % 2 == 0).alias("ok"),
            F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("at"))
    digits = F.col("id").cast("string").cast("binary")
    return ids.select(F.substring(F.concat(F.lit(b"x" * args.size), digits), -args.size, args.size).alias("value"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (= Spark tasks)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-fsync", action="store_true", help="broker journalSyncData=false")
    parser.add_argument("--avro", action="store_true", help="an AVRO topic of five fields instead of binary rows")
    parser.add_argument("--warm-up-rows", type=int, default=WARM_UP_ROWS,
                        help="rows written and read through the same queries before the measured ones")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a session setting, over the benchmark's own (SESSION_CONF)")
    args = parser.parse_args()
    if not args.avro and len(str(max(args.rows, args.warm_up_rows) - 1)) > args.size:
        parser.error("--size must hold the row numbers")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from magnetar.spark import MagnetarDataSource

    with tempfile.TemporaryDirectory() as tmp:
        config = {"brokerDeduplicationEnabled": "true", "allowAutoTopicCreationType": "partitioned",
                  "defaultNumPartitions": str(args.partitions),
                  "journalSyncData": "false" if args.no_fsync else "true"}
        broker = BrokerProcess(Path(tmp) / "data", config).start()
        try:
            builder = (SparkSession.builder.master(args.master).appName("magnetar-spark-bench")
                       .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                       .config("spark.sql.shuffle.partitions", str(args.partitions)))
            for key, value in {**SESSION_CONF, **dict(kv.split("=", 1) for kv in args.spark_conf)}.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(MagnetarDataSource)
            options = {"service.url": broker.service_url, "admin.url": broker.web_url,
                       "topic": "persistent://public/default/spark-bench"}
            if args.avro:
                for topic in ("spark-bench", "spark-bench-warm-up"):
                    upload_schema(broker.web_url, f"public/default/{topic}", AVRO_RECORD)
            # Warm up off the clock, through the same queries: starts the Python workers, imports
            # the client, and lets the JVM compile what a long-running session would have compiled.
            warm = {**options, "topic": "persistent://public/default/spark-bench-warm-up"}
            bench_rows(spark, args.warm_up_rows, args).write.format("magnetar").options(**warm).mode("append").save()
            spark.read.format("magnetar").options(**warm).load().write.format("noop").mode("overwrite").save()

            assert broker.proc is not None
            me, broker_pid = os.getpid(), broker.proc.pid
            rows = bench_rows(spark, args.rows, args)
            write = measured(lambda: rows.write.format("magnetar").options(**options).mode("append").save(),
                             me, broker_pid)
            read = measured(lambda: spark.read.format("magnetar").options(**options).load()
                            .write.format("noop").mode("overwrite").save(), me, broker_pid)
            checkpoint = str(Path(tmp) / "stream-checkpoint")
            stream_read = measured(lambda: spark.readStream.format("magnetar")
                                   .options(**options, startingOffsets="earliest").load()
                                   .writeStream.format("noop").option("checkpointLocation", checkpoint)
                                   .trigger(availableNow=True).start().awaitTermination(), me, broker_pid)
            counted = spark.read.format("magnetar").options(**options).load().count()
            spark.stop()
        finally:
            broker.kill()

    base = {"rows": args.rows, "size_bytes": None if args.avro else args.size,
            "schema": "AVRO, 5 fields" if args.avro else "none (binary value)", "partitions": args.partitions,
            "master": args.master, "warm_up_rows": args.warm_up_rows, "spark_conf": args.spark_conf,
            "fsync": not args.no_fsync, "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2)}
    for phase, (seconds, spark_cpu, broker_cpu, load), extra in (
            ("write", write, {}), ("read", read, {"rows_read": counted}), ("stream_read", stream_read, {})):
        # CPU seconds make runs comparable on a busy machine: rows per CPU-second of Spark
        # (driver, JVM, Python workers) and of the broker.
        spark_total = sum(spark_cpu.values())
        print(json.dumps({"phase": phase, **base, "loadavg_1m_at_start": round(load, 2), "seconds": round(seconds, 2),
                          "rows_per_s": round(args.rows / seconds), "spark_cpu_s": round(spark_total, 1),
                          "broker_cpu_s": round(broker_cpu, 1),
                          "spark_cpu_s_per_million_rows": round(spark_total * 1e6 / args.rows, 2),
                          "spark_cpu_s_per_million_rows_by_process": {
                              kind: round(cpu * 1e6 / args.rows, 2) for kind, cpu in spark_cpu.items()},
                          "broker_cpu_s_per_million_rows": round(broker_cpu * 1e6 / args.rows, 2),
                          "rows_per_cpu_s": round(args.rows / max(spark_total + broker_cpu, 1e-9)), **extra}),
              flush=True)
    if counted != args.rows:
        raise SystemExit(f"read {counted} rows, wrote {args.rows}")


if __name__ == "__main__":
    main()
