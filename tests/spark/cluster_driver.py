"""A Spark application for the standalone-cluster tests, run with ``spark-submit --master spark://...``.

``cluster_driver.py MODE SERVICE_URL ADMIN_URL SOURCE SINK CHECKPOINT``:

* ``batch`` — read SOURCE whole (a batch read) and write it to SINK (a batch write, ``writeId``
  from CHECKPOINT's name so a re-run adds nothing);
* ``run`` — copy SOURCE to SINK with a streaming query (checkpoint CHECKPOINT, small
  micro-batches) until the process is killed;
* ``drain`` — the same query, ``availableNow``: copies what is left and exits.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(mode: str, service_url: str, admin_url: str, source: str, sink: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    from magnetar.spark import MagnetarDataSource

    spark = SparkSession.builder.appName(f"magnetar-cluster-{mode}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MagnetarDataSource)
    connection = {"service.url": service_url, "admin.url": admin_url}
    if mode == "batch":
        rows = spark.read.format("magnetar").options(**connection, topic=source).load()
        (rows.select("value").write.format("magnetar")
         .options(**connection, topic=sink, writeId=Path(checkpoint).name).mode("append").save())
    else:
        stream = (spark.readStream.format("magnetar")
                  .options(**connection, topic=source, startingOffsets="earliest",
                           maxRecordsPerTrigger="5000").load())
        writer = (stream.select("value").writeStream.format("magnetar").options(**connection, topic=sink)
                  .option("checkpointLocation", checkpoint))
        trigger = {"availableNow": True} if mode == "drain" else {"processingTime": "100 milliseconds"}
        writer.trigger(**trigger).start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
