"""bench/failover_campaign.py: its options refuse bad input before anything starts, and
(slow) two SIGKILL trials against a two-broker cluster lose and duplicate nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.testing.zookeeper_process import zookeeper_unavailable

BENCH = Path(__file__).resolve().parents[2] / "bench" / "failover_campaign.py"


@pytest.mark.parametrize(("args", "said"), [
    (["--parts", "kill,bogus"], "parts are among"),
    (["--trials", "0"], "must be above 0"),
    (["--parts", "pause", "--brokers", "1"], "need 2 or more"),
])
def test_bad_options_are_refused_before_anything_starts(args: list[str], said: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), *args, "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_sigkill_trials_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    reason = zookeeper_unavailable()
    if reason is not None:
        pytest.skip(f"needs ZooKeeper: {reason}")
    done = subprocess.run([sys.executable, str(BENCH), "--parts", "kill", "--trials", "2", "--data-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    print(done.stdout)
    assert summary["part"] == "kill" and summary["trials"] == 2
    assert summary["not_recovered"] == 0 and summary["hangs"] == 0, summary
    assert (summary["lost"], summary["duplicates"], summary["moved_ids"]) == (0, 0, 0), summary
    assert (summary["lost_after_reload"], summary["duplicates_after_reload"]) == (0, 0), summary
    assert summary["acknowledged"] > 0 and summary["clean_trials"] == 2, summary
