"""A Spark driver that copies a Magnetar topic into Parquet files with a streaming query.

Run as ``python parquet_driver.py SERVICE_URL ADMIN_URL TOPIC OUT CHECKPOINT MODE MAX_RECORDS``;
MODE ``run`` keeps the query going until the process is killed, ``drain`` copies what is left
(availableNow) and exits. The driver-kill test of the issue's reproduction SIGKILLs it.
"""

from __future__ import annotations

import os
import sys


def main(service_url: str, admin_url: str, topic: str, out: str, checkpoint: str, mode: str,
         max_records: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from magnetar.spark import MagnetarDataSource

    spark = (SparkSession.builder.master("local[2]").appName("magnetar-parquet-driver")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MagnetarDataSource)
    stream = (spark.readStream.format("magnetar")
              .options(**{"service.url": service_url, "admin.url": admin_url}, topic=topic,
                       startingOffsets="earliest", maxRecordsPerTrigger=max_records).load())
    writer = (stream.select("value").writeStream.format("parquet").option("path", out)
              .option("checkpointLocation", checkpoint))
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:8])
