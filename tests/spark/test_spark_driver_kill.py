"""Driver SIGKILL in the middle of a streaming copy from one topic to another: after two kills
and restarts from the checkpoint, every row is in the sink exactly once (the source's
checkpointed offsets on one side, the deduplicating sink on the other)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from spark_helpers import Admin, client_for, new_topic, produce, read_values, wait_until
from test_spark_sink import assert_exactly_once

from magnetar.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 30_000
DRIVER = Path(__file__).with_name("streaming_driver.py")


def _driver(broker: BrokerProcess, source: str, sink: str, checkpoint: Path, mode: str) -> subprocess.Popen[bytes]:
    # Its own process group: the kill takes the driver's JVM with it, as a crashed host would.
    return subprocess.Popen([sys.executable, str(DRIVER), broker.service_url, broker.web_url, source, sink,
                             str(checkpoint), mode], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.timeout(600)
def test_driver_killed_twice_mid_stream_copies_every_row_once(broker: BrokerProcess, admin: Admin,
                                                              tmp_path: Path) -> None:
    source, sink = new_topic("kill-in", "public/nodedup"), new_topic("kill-out")
    admin.create_partitioned(source, 2)
    client = client_for(broker.service_url)
    expected = [b"row-%06d-" % i + b"x" * 90 for i in range(ROWS)]
    produce(client, source, expected)
    checkpoint = tmp_path / "checkpoint"
    copied = 0
    for _ in range(2):
        driver = _driver(broker, source, sink, checkpoint, "run")
        try:
            copied = wait_until(lambda before=copied: (n := len(read_values(client, sink))) > before + 1000 and n,
                                timeout_s=240, what="the restarted query to copy more rows")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        assert copied < ROWS, "the stream should be killed before it copied everything"
    drain = _driver(broker, source, sink, checkpoint, "drain")
    assert drain.wait(timeout=300) == 0
    client.close()
    assert_exactly_once(broker, sink, expected)
