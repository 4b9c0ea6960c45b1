"""Effectively-once publishing through SIGKILLs of the broker (a short version of bench/dedup_crash_bench.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.testing.dedup_crash import run_trial


@pytest.mark.timeout(300)
def test_no_duplicates_and_no_losses_through_kills(tmp_path: Path) -> None:
    result = run_trial(tmp_path / "data", messages=3000, kills=2, seed=7)
    assert (result.duplicates, result.losses, result.out_of_order) == (0, 0, 0)
