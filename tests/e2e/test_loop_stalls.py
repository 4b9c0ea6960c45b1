"""The broker sees its own pauses: a broker process stopped (SIGSTOP) for a while and let go
(SIGCONT) finds its timer late by as much, and says so on /metrics and in its log.

The threshold is above what else may hold a new broker's loop on a busy machine (the HTTP
routes' warm-up thread, a first scrape), so the one line logged is the stop's."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_helpers import wait_until

from magnetar.testing.broker_process import BrokerProcess

STOPPED_S = 1.3
THRESHOLD_MS = 1000
#: the timer rings at least every idle heartbeat (100 ms): the ring due first after the stop
#: began is late by the stop less up to that much
SEEN_AT_LEAST_S = STOPPED_S - 0.1 - 0.05


@pytest.fixture
def lag_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", {"loopStallThresholdMillis": str(THRESHOLD_MS)}).start()
    yield proc
    proc.kill()


def sample(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} {labels} not on /metrics"
    return float(match.group(1))


def test_a_stopped_broker_reports_the_stall_on_metrics_and_in_its_log(lag_broker: BrokerProcess) -> None:
    assert lag_broker.proc is not None
    with httpx.Client(base_url=lag_broker.web_url, timeout=10) as admin:
        before = admin.get("/metrics").text
        assert sample(before, "magnetar_event_loop_lag_seconds_count") > 0  # the heartbeat rings
        late_before = sample(before, "magnetar_event_loop_lag_seconds_count") - \
            sample(before, "magnetar_event_loop_lag_seconds_bucket", 'le="1.0"')

        log_start = lag_broker.log_path.stat().st_size
        lag_broker.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STOPPED_S)  # the stall itself
        finally:
            lag_broker.proc.send_signal(signal.SIGCONT)

        def stall_seen() -> str | None:
            text = admin.get("/metrics").text
            return text if sample(text, "magnetar_event_loop_longest_stall_seconds") >= SEEN_AT_LEAST_S else None

        after = wait_until(stall_seen, timeout_s=10, what="the stall on /metrics")
    late_after = sample(after, "magnetar_event_loop_lag_seconds_count") - \
        sample(after, "magnetar_event_loop_lag_seconds_bucket", 'le="1.0"')
    assert late_after > late_before  # a ring later than 1 s went into the histogram
    assert sample(after, "magnetar_event_loop_stalls_total") >= 1

    def logged() -> re.Match[str] | None:
        with open(lag_broker.log_path, errors="replace") as log:
            log.seek(log_start)
            return re.search(r"event loop stalled (\d+\.\d) ms \(.*?\): (.*)", log.read())

    line = wait_until(logged, timeout_s=10, what="the stall in the broker's log")
    assert float(line.group(1)) >= SEEN_AT_LEAST_S * 1000, lag_broker.log_tail()
    assert "the process stopped" in line.group(2)
