"""The protocol-level load generator runs and finds every message exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "wire_bench.py"


def run_bench(*args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_unbatched_run_counts_every_message_once() -> None:
    result = run_bench("--messages", "2000", "--generators", "1")
    assert (result["messages"], result["lost"], result["duplicates"], result["crc_errors"]) == (2000, 0, 0, 0)
    assert float(result["broker_cpu_us_per_entry"]) > 0  # type: ignore[arg-type]


def test_batched_run_at_a_fixed_rate_reports_latency() -> None:
    result = run_bench("--messages", "4000", "--batch", "100", "--rate", "400")
    assert (result["messages"], result["lost"], result["duplicates"]) == (4000, 0, 0)
    assert result["publish_p99_ms"] is not None


def test_another_checkout_must_hold_the_package(tmp_path: Path) -> None:
    """A folder without Magnetar's sources would run the installed broker and compare it with
    itself: refused before anything starts."""
    done = subprocess.run([sys.executable, str(BENCH), "--broker-src", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "is not a checkout of Magnetar" in done.stderr, done.stderr
