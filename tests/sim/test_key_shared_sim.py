"""Deterministic simulation of Key_Shared (``magnetar.testing.sim``) in CI.

Thousands of seeded schedules drive the real dispatcher through joins, leaves,
crashes, stalls, nacks and permit starvation; every run must keep the contract and
drain. A failure prints the seed and its schedule: ``python -m magnetar.testing.sim
--seed N`` replays it exactly.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.key_shared.draining_hashes_tracker import DrainingHashesTracker
from magnetar.testing.sim import run as run_any_type
from magnetar.testing.sim.options import KEY_SHARED, parse_type_mix
from magnetar.testing.sim.runner import RunResult, read_schedule_file

SHORT_STEPS = 60
#: the Key_Shared simulation's regressions (``broker_*`` ones belong to the broker-wide simulation)
REGRESSIONS = sorted(path for path in (Path(__file__).parent / "regressions").glob("*.txt")
                     if not path.name.startswith("broker_"))
CHUNK = 250
KEY_SHARED_ONLY = parse_type_mix(KEY_SHARED)


def run(seed: int, steps: int | None = None, **kwargs: Any) -> RunResult:
    """A seed's run with a Key_Shared subscription (the other types: test_all_types_sim)."""
    return run_any_type(seed, steps, types=KEY_SHARED_ONLY, **kwargs)


def _failures(results: list[RunResult]) -> str:
    failed = [r for r in results if not r.ok]
    return "\n\n".join(f"seed {r.options.seed}: {r.violation}\n{r.schedule_text()}" for r in failed[:3])


@pytest.mark.parametrize("first", range(0, 2000, CHUNK))
def test_short_schedules_keep_the_contract_and_drain(first: int) -> None:
    results = [run(seed, SHORT_STEPS) for seed in range(first, first + CHUNK)]
    assert all(r.ok for r in results), _failures(results)
    assert sum(r.deliveries for r in results) > CHUNK * 5


@pytest.mark.parametrize("first", range(10_000, 10_600, 200))
def test_full_length_schedules_keep_the_contract_and_drain(first: int) -> None:
    results = [run(seed) for seed in range(first, first + 200)]
    assert all(r.ok for r in results), _failures(results)


def test_classic_mode_schedules_keep_its_contract_and_drain() -> None:
    results = [run(seed, SHORT_STEPS, overrides={"classic": "true"}) for seed in range(20_000, 20_300)]
    assert all(r.ok for r in results), _failures(results)


def test_delayed_delivery_schedules_keep_ownership_and_drain() -> None:
    """Delayed entries (Pulsar #8703/#20233) neither stall Key_Shared nor share a key."""
    results = [run(seed, SHORT_STEPS, overrides={"delayed_probability": "0.2"}) for seed in range(30_000, 30_300)]
    assert all(r.ok for r in results), _failures(results)


def test_schedules_reach_the_states_that_matter() -> None:
    """Coverage, not verdicts: the schedules do drive the dispatcher through draining hashes,
    parked entries, redeliveries, refused subscribes and the classic mode's holds."""
    totals: dict[str, int] = {}
    for seed in range(40_000, 40_150):
        for key, count in run(seed).coverage.items():
            totals[key] = totals.get(key, 0) + count
    for key in ("steps_with_draining_hashes", "steps_with_replay", "redeliveries", "refused_subscribes",
                "steps_with_recently_joined", "steps_held_by_entries_sent_beyond"):
        assert totals.get(key, 0) > 0, (key, totals)


def test_same_seed_same_trace() -> None:
    """trio's determinism test: one seed, one schedule, one sequence of deliveries."""
    for seed in (1, 7, 42):
        first, second = run(seed), run(seed)
        assert [str(a) for a in first.steps] == [str(a) for a in second.steps]
        assert first.trace_digest == second.trace_digest
    assert run(1).trace_digest != run(2).trace_digest


def _digest(seed: int) -> str:
    return run(seed).trace_digest


def test_same_seed_same_trace_in_other_processes() -> None:
    """Object addresses differ between processes: nothing may depend on them."""
    seeds = [3, 11, 19]
    here = [_digest(s) for s in seeds]
    with ProcessPoolExecutor(2) as pool:
        there = list(pool.map(_digest, seeds))
    assert here == there


def test_a_printed_schedule_replays_to_the_same_trace() -> None:
    original = run(5)
    options, steps = read_schedule_file(original.schedule_text())
    assert options == original.options
    replayed = run(0, schedule=steps, options=options)
    assert replayed.ok
    assert replayed.trace_digest == original.trace_digest


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_schedules(path: Path) -> None:
    """Schedules that once broke the contract, kept as files with their options."""
    options, steps = read_schedule_file(path.read_text())
    assert options is not None and steps
    result = run(0, schedule=steps, options=options)
    assert result.ok, result.violation


def test_the_command_line_prints_the_seed_first() -> None:
    out = subprocess.run([sys.executable, "-m", "magnetar.testing.sim", "--seed", "12", "--schedules", "3"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "seed 12"
    assert '"violations": 0' in out[-1]


def test_the_checkers_catch_a_dispatcher_that_ignores_draining_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator has teeth: without draining-hash blocking, keys end up at two consumers."""
    monkeypatch.setattr(DrainingHashesTracker, "should_block_sticky_key_hash", lambda self, c, h: False)
    monkeypatch.setattr(DrainingHashesTracker, "handle_adding_pending_ack", lambda self, c, h: True)
    results = [run(seed, overrides={"classic": "false", "allow_out_of_order": "false"}) for seed in range(40)]
    failed = [r for r in results if not r.ok]
    assert failed, "no schedule noticed"
    assert any("holds" in (r.violation or "") for r in failed)
    replay = run(failed[0].options.seed, overrides={"classic": "false", "allow_out_of_order": "false"})
    assert replay.violation == failed[0].violation and replay.failed_step == failed[0].failed_step


@pytest.mark.slow
def test_a_hundred_thousand_schedules() -> None:
    """The long campaign: ``pytest -m slow tests/sim`` (or the command line with --jobs)."""
    out = subprocess.run([sys.executable, "-m", "magnetar.testing.sim", "--seed", "1000000",
                          "--schedules", "100000", "--jobs", "2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-5000:]
