"""The latency benchmark runs both loads and reports percentiles and the loop's lag (a run
is slow-marked: CI does not run the benchmark); bad options are refused before any broker
starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "latency_bench.py"


@pytest.mark.slow
def test_a_short_run_reports_every_load() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--rates", "500", "--duration", "1", "--idle-topics", "5"],
                          capture_output=True, text=True, timeout=120, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["broker"], r["load"], r["rate"]) for r in rows] == [("magnetar", "official", 500),
                                                                  ("magnetar", "protocol", 500)]
    for row in rows:
        assert (row["messages"], row["failures"]) == (500, 0)
        assert 0 < row["p50"] <= row["p99"] <= row["p99.9"] <= row["p99.99"] <= row["max"]
        assert row["loop"]["timer_rings"] > 0  # the heartbeat rang during the load


@pytest.mark.parametrize(("args", "message"), [
    (["--rates", "0"], "each above 0"),
    (["--rates", "fast"], "rates are whole msgs/s"),
    (["--loads", "official,raw"], "loads are 'official' and/or 'protocol'"),
    (["--duration", "0"], "must be above 0"),
    (["--peer", "kafka"], "invalid choice"),
    (["--set", "loopStallThresholdMillis"], "give KEY=VALUE"),
    (["--peer", "pulsar-lite", "--peer-binary", "/no/such/pulsar-lite"], "no such file"),
])
def test_bad_options_are_refused(args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
