"""A Spark driver that copies one Magnetar topic into another with a streaming query.

Run as ``python streaming_driver.py SERVICE_URL ADMIN_URL SOURCE SINK CHECKPOINT MODE``; MODE
``run`` keeps the query going in small micro-batches until the process is killed, ``drain``
copies what is left (availableNow) and exits. The driver-kill test SIGKILLs it mid-stream.
"""

from __future__ import annotations

import os
import sys


def main(service_url: str, admin_url: str, source: str, sink: str, checkpoint: str, mode: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from magnetar.spark import MagnetarDataSource

    spark = (SparkSession.builder.master("local[2]").appName("magnetar-driver-kill")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MagnetarDataSource)
    connection = {"service.url": service_url, "admin.url": admin_url}
    stream = (spark.readStream.format("magnetar")
              .options(**connection, topic=source, startingOffsets="earliest", maxRecordsPerTrigger="1000").load())
    writer = (stream.select("value").writeStream.format("magnetar").options(**connection, topic=sink)
              .option("checkpointLocation", checkpoint))
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
