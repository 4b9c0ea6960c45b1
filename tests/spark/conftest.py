"""One local Spark session and one Magnetar broker process for the whole Spark suite.

Spark's start-up dominates the suite's time, so everything shares a session
(``local[2,2]``: two task threads, a task may fail once and be retried before its job fails,
which the failure-injection tests rely on) and a broker configured for what the
tests exercise: deduplication on, auto-created topics partitioned in two, small
ledgers (so reads cross ledger boundaries and retention can trim), infinite retention
unless a topic's policy says otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark", reason="the Spark suite needs the spark extra: pip install 'magnetar[spark]'")
pytest.importorskip("pyarrow", reason="the Spark suite needs pyarrow (the spark extra)")

from spark_helpers import LEDGER_ENTRIES, Admin  # noqa: E402

from magnetar.testing.broker_process import BrokerProcess  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    java = shutil.which("java") or (os.environ.get("JAVA_HOME") and os.path.join(os.environ["JAVA_HOME"], "bin"))
    for item in items:
        if "/spark/" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.spark)
        if not java:
            item.add_marker(pytest.mark.skip(reason="Spark needs Java 17 (java not on PATH, JAVA_HOME unset)"))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", {
        "brokerDeduplicationEnabled": "true",
        "allowAutoTopicCreationType": "partitioned",
        "defaultNumPartitions": "2",
        "managedLedgerMaxEntriesPerLedger": str(LEDGER_ENTRIES),
        "managedLedgerDefaultMarkDeleteRateLimit": "10",
        # one broker serves the whole Spark session: a topic written by one step and read by a
        # later one must not be deleted as inactive in between
        "brokerDeleteInactiveTopicsEnabled": "false",
        # tests read topics without subscriptions: keep everything unless a test says otherwise,
        # and check often so that a test that does sees retention act at once
        "defaultRetentionTimeInMinutes": "-1",
        "defaultRetentionSizeInMB": "-1",
        "retentionCheckIntervalInSeconds": "1",
    }).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="session")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.web_url) as a:
        a.create_namespace("public/nodedup", deduplication=False)
        yield a


@pytest.fixture(scope="session")
def spark(broker: BrokerProcess) -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    from magnetar.spark import MagnetarDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("magnetar-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .config("spark.sql.streaming.minBatchesToRetain", "5")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(MagnetarDataSource)
    yield session
    session.stop()
