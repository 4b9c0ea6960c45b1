"""Spark through Magnetar end to end: write then read N messages of S bytes; prints rows/s as JSON.

A broker process and a local Spark session share the machine, as in the issue's
set-up. The write goes through the effectively-once sink (deduplication on), the
read through the batch source into Spark's ``noop`` sink, so every row is
materialised in the JVM.

Usage: python bench/spark_bench.py [--rows 1000000] [--size 100] [--partitions 2] [--master local[2]]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (= Spark tasks)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-fsync", action="store_true", help="broker journalSyncData=false")
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
            # Warm up the Python workers so start-up is not counted against either phase.
            spark.range(10, numPartitions=args.partitions).count()

            rows = (spark.range(args.rows, numPartitions=args.partitions)
                    .select(F.lpad(F.col("id").cast("string"), args.size, "x").cast("binary").alias("value")))
            started = time.perf_counter()
            rows.write.format("magnetar").options(**options).mode("append").save()
            write_s = time.perf_counter() - started

            started = time.perf_counter()
            read = spark.read.format("magnetar").options(**options).load()
            read.write.format("noop").mode("overwrite").save()
            read_s = time.perf_counter() - started
            counted = spark.read.format("magnetar").options(**options).load().count()
            spark.stop()
        finally:
            broker.kill()

    base = {"rows": args.rows, "size_bytes": args.size, "partitions": args.partitions, "master": args.master,
            "fsync": not args.no_fsync, "cpus": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps({"phase": "write", **base, "seconds": round(write_s, 2),
                      "rows_per_s": round(args.rows / write_s)}), flush=True)
    print(json.dumps({"phase": "read", **base, "seconds": round(read_s, 2),
                      "rows_per_s": round(args.rows / read_s), "rows_read": counted}), flush=True)
    if counted != args.rows:
        raise SystemExit(f"read {counted} rows, wrote {args.rows}")


if __name__ == "__main__":
    main()
