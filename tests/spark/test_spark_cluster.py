"""The source and sink on a Spark standalone cluster: a master and two workers, each its own
process started with the pyspark package's ``bin/spark-class``, executors in processes of their
own, applications sent with ``spark-submit --master spark://...``.

Batch read and write; a streaming copy with a checkpoint (read and write); the exactly-once kill
tests: the driver SIGKILLed twice mid-stream, then an executor SIGKILLed twice and SIGTERMed once
mid-batch (Spark retries its tasks on another executor); 100,000 rows in the sink exactly once.
Slow: run with ``bin/test -m slow tests/spark/test_spark_cluster.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from spark_helpers import Admin, client_for, new_topic, produce, read_values, wait_until
from test_spark_sink import assert_exactly_once

from magnetar.testing.broker_process import BrokerProcess, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 100_000
DRIVER = Path(__file__).with_name("cluster_driver.py")


def spark_bin(name: str) -> str:
    import pyspark
    return str(Path(pyspark.__file__).parent / "bin" / name)


@dataclass
class StandaloneCluster:
    master_url: str
    web_url: str
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]
    logs: Path

    def executor_pids(self) -> list[int]:
        """Executor JVMs the workers started (children of a worker process)."""
        workers = {w.pid for w in self.workers}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent in workers and b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(int(entry.name))
        return found

    def alive_workers(self) -> int:
        try:
            doc = httpx.get(f"{self.web_url}/json/", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(logs),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    port, web_port = free_port(), free_port()

    def spark_class(name: str, *args: str) -> subprocess.Popen[bytes]:
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        return subprocess.Popen([spark_bin("spark-class"), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    master = spark_class("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(web_port))
    master_url = f"spark://127.0.0.1:{port}"
    workers = [spark_class(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                           "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                           "--work-dir", str(logs / f"work-{i}"), master_url) for i in range(2)]
    cluster = StandaloneCluster(master_url, f"http://127.0.0.1:{web_port}", master, workers, logs)
    try:
        wait_until(lambda: cluster.alive_workers() == 2, timeout_s=180, what="two workers to register")
        yield cluster
    finally:
        for proc in [*workers, master]:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def submit(cluster: StandaloneCluster, broker: BrokerProcess, mode: str, source: str, sink: str,
           checkpoint: Path) -> subprocess.Popen[bytes]:
    log = open(cluster.logs / f"driver-{mode}-{checkpoint.name}.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        [spark_bin("spark-submit"), "--master", cluster.master_url,
         "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.executor.cores=1",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
         str(DRIVER), mode, broker.service_url, broker.web_url, source, sink, str(checkpoint)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def copied_more(broker: BrokerProcess, topic: str, before: int, driver: subprocess.Popen[bytes],
                more: int = 5000) -> int:
    """The rows in ``topic`` once more than ``more`` were added since ``before`` (0: not yet)."""
    assert driver.poll() is None, f"the driver exited ({driver.returncode}); see its log in the cluster folder"
    n = rows_in(broker, topic)
    return n if n > before + more else 0


def rows_in(broker: BrokerProcess, topic: str) -> int:
    client = client_for(broker.service_url)
    try:
        return len(read_values(client, topic))
    finally:
        client.close()


@pytest.fixture
def source_rows(broker: BrokerProcess, admin: Admin) -> tuple[str, list[bytes]]:
    source = new_topic("cluster-in", "public/nodedup")
    admin.create_partitioned(source, 2)
    client = client_for(broker.service_url)
    expected = [b"row-%06d-" % i + b"x" * 89 for i in range(ROWS)]
    produce(client, source, expected)
    client.close()
    return source, expected


@pytest.mark.timeout(900)
def test_batch_read_and_write_on_the_cluster(cluster: StandaloneCluster, broker: BrokerProcess,
                                             source_rows: tuple[str, list[bytes]], tmp_path: Path) -> None:
    source, expected = source_rows
    sink = new_topic("cluster-batch")
    for _ in range(2):  # the same writeId twice: the second run adds nothing
        assert submit(cluster, broker, "batch", source, sink, tmp_path / "job-1").wait(timeout=400) == 0
    assert_exactly_once(broker, sink, expected)


@pytest.mark.timeout(3600)
def test_stream_survives_driver_kills_then_executor_kills(cluster: StandaloneCluster, broker: BrokerProcess,
                                                          source_rows: tuple[str, list[bytes]],
                                                          tmp_path: Path) -> None:
    source, expected = source_rows
    sink = new_topic("cluster-stream")
    checkpoint = tmp_path / "checkpoint"
    copied = 0
    for _ in range(2):  # the driver: SIGKILL of its process group, as a crashed host
        driver = submit(cluster, broker, "run", source, sink, checkpoint)
        try:
            copied = wait_until(lambda before=copied, d=driver: copied_more(broker, sink, before, d),
                                timeout_s=900, what="the restarted query to copy more rows")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        assert copied < ROWS, "the stream should be killed before it copied everything"
    driver = submit(cluster, broker, "run", source, sink, checkpoint)
    try:
        # An executor killed mid-batch, Spark retries its tasks: SIGKILL twice (a crash), then
        # SIGTERM (a stop: the executor's shutdown hooks run while its tasks are cut short).
        for sig in (signal.SIGKILL, signal.SIGKILL, signal.SIGTERM):
            copied = wait_until(lambda before=copied, d=driver: copied_more(broker, sink, before, d),
                                timeout_s=900, what="the query to copy more rows")
            assert copied < ROWS, "the executor should be killed before the stream copied everything"
            executors = wait_until(cluster.executor_pids, timeout_s=60, what="an executor")
            os.kill(executors[0], sig)
            wait_until(lambda pid=executors[0]: pid not in cluster.executor_pids(), timeout_s=120,
                       what=f"the executor to exit on signal {sig.name}")
        # The query goes on after the last loss too: its tasks ran again elsewhere.
        wait_until(lambda before=copied, d=driver: copied_more(broker, sink, before, d, more=0),
                   timeout_s=900, what="the query to copy more rows after the last executor's loss")
        assert driver.poll() is None, "an executor's loss must not end the query"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert submit(cluster, broker, "drain", source, sink, checkpoint).wait(timeout=600) == 0
    assert_exactly_once(broker, sink, expected)
