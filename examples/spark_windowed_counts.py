"""A Structured Streaming pipeline on Magnetar: keyed events counted per key in event-time windows.

Reads a topic with ``format("magnetar")``, counts events per key and one-minute
window (event time: ``__eventTime``, else the publish time), and appends finished
windows to Parquet. The offsets live in the checkpoint, so running it again picks
up where the last run stopped; ``--produce`` first publishes sample events.

    magnetar standalone &
    python examples/spark_windowed_counts.py --produce 5000 --out /tmp/counts
    python examples/spark_windowed_counts.py --out /tmp/counts      # later: only new events

Needs the spark extra (``pip install "magnetar[spark]"``) and Java 17.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import pulsar

KEYS = ("sensor-a", "sensor-b", "sensor-c", "sensor-d")


def produce(service_url: str, topic: str, count: int) -> None:
    """Keyed events spread over the last ten minutes of event time, a little out of order."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    start_ms = int(time.time() * 1000) - 600_000
    rng = random.Random(7)
    for i in range(count):
        event_ms = start_ms + i * 600_000 // count + rng.randint(-5_000, 5_000)
        producer.send_async(f"reading {i}".encode(), None, partition_key=rng.choice(KEYS),
                            event_timestamp=event_ms)
    producer.flush()
    client.close()
    print(f"published {count} events to {topic}")


def run(args: argparse.Namespace) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from magnetar.spark import MagnetarDataSource

    spark = (SparkSession.builder.master("local[2]").appName("magnetar-windowed-counts")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MagnetarDataSource)

    events = (spark.readStream.format("magnetar")
              .option("service.url", args.service_url)
              .option("admin.url", args.admin_url)
              .option("topic", args.topic)
              .option("startingOffsets", "earliest")
              .option("subscriptionName", "windowed-counts")  # lag shows as this subscription's backlog
              .load())
    counts = (events
              .withColumn("event_time", F.coalesce("__eventTime", "__publishTime"))
              .withWatermark("event_time", "30 seconds")
              .groupBy(F.window("event_time", "1 minute"), F.col("__key").alias("key"))
              .count()
              .select(F.col("window.start").alias("window_start"), "key", "count"))
    query = (counts.writeStream.format("parquet").outputMode("append")
             .option("path", os.path.join(args.out, "data"))
             .option("checkpointLocation", os.path.join(args.out, "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    result = spark.read.parquet(os.path.join(args.out, "data")).orderBy("window_start", "key")
    result.show(40, truncate=False)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--topic", default="persistent://public/default/sensor-events")
    parser.add_argument("--out", default="./windowed-counts", help="Parquet output and checkpoint directory")
    parser.add_argument("--produce", type=int, default=0, help="publish this many sample events first")
    args = parser.parse_args()
    if args.produce:
        produce(args.service_url, args.topic, args.produce)
    run(args)


if __name__ == "__main__":
    main()
