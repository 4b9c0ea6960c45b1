"""Crash-and-restart schedules: receipted messages survive, nothing is stored twice, the
cursor never runs ahead, and everything drains once faults stop."""

from __future__ import annotations

import pytest

from magnetar.testing.sim.crash_restart import Violation, run

CHUNK = 100


@pytest.mark.parametrize("first", range(0, 300, CHUNK))
def test_crash_restart_schedules_keep_their_promises(first: int) -> None:
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            run(seed)
        except Violation as exc:
            failures.append(str(exc))
    assert failures == []


def test_a_seed_replays_the_same_run() -> None:
    a, b = run(12345), run(12345)
    assert (a.crashes, a.steps, a.stored(), a.now_ms) == (b.crashes, b.steps, b.stored(), b.now_ms)
    assert a.crashes > 0


@pytest.mark.slow
def test_crash_restart_campaign() -> None:
    for seed in range(100_000, 110_000):
        run(seed)
