"""The simulation over every subscription type (``magnetar.testing.sim``) in CI.

Each seed draws Exclusive, Failover, Shared or Key_Shared and runs a schedule of
joins, crashes, nacks, cumulative acks, seeks and readers against the real core. The
mutants below show the checkers of each type fail when the broker misbehaves.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from magnetar.core.dispatchers.base import Dispatcher
from magnetar.core.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.core.dispatchers.single_active_consumer import SingleActiveConsumerDispatcher
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor import Cursor
from magnetar.testing.sim import run
from magnetar.testing.sim.options import ALL_TYPES, SUB_TYPES, parse_type_mix
from magnetar.testing.sim.runner import RunResult, read_schedule_file

SCHEDULES = 2000
CHUNK = 250
MUTANT_SEEDS = range(60)


def _failures(results: list[RunResult]) -> str:
    failed = [r for r in results if not r.ok]
    return "\n\n".join(f"seed {r.options.seed}: {r.violation}\n{r.schedule_text()}" for r in failed[:3])


@pytest.mark.parametrize("first", range(50_000, 50_000 + SCHEDULES, CHUNK))
def test_schedules_of_every_type_keep_their_contract_and_drain(first: int) -> None:
    results = [run(seed) for seed in range(first, first + CHUNK)]
    assert all(r.ok for r in results), _failures(results)
    assert {r.options.sub_type for r in results} == set(SUB_TYPES)


def test_schedules_reach_seeks_readers_and_every_type() -> None:
    totals: dict[str, int] = {}
    for seed in range(60_000, 60_200):
        for key, count in run(seed).coverage.items():
            totals[key] = totals.get(key, 0) + count
    for key in ("seeks", "reader_deliveries", "redeliveries", "refused_subscribes",
                *(f"runs_{t}" for t in SUB_TYPES)):
        assert totals.get(key, 0) > 0, (key, totals)


def test_the_type_mix_narrows_the_draw() -> None:
    only = parse_type_mix("failover")
    assert {run(seed, 30, types=only).options.sub_type for seed in range(20)} == {"Failover"}
    assert parse_type_mix("Shared,key_shared=2") == (("Shared", 1.0), ("Key_Shared", 2.0))
    with pytest.raises(ValueError):
        parse_type_mix("Exclusiv")


@pytest.mark.parametrize("sub_type", SUB_TYPES)
def test_same_seed_same_trace(sub_type: str) -> None:
    types = parse_type_mix(sub_type)
    for seed in (1, 7):
        first, second = run(seed, types=types), run(seed, types=types)
        assert [str(a) for a in first.steps] == [str(a) for a in second.steps]
        assert first.trace_digest == second.trace_digest
        assert first.deliveries > 0
    assert run(1, types=types).trace_digest != run(2, types=types).trace_digest


def _digest(seed: int) -> str:
    return run(seed).trace_digest


def test_same_seed_same_trace_in_other_processes() -> None:
    seeds = [4, 5, 6, 9]
    here = [_digest(s) for s in seeds]
    with ProcessPoolExecutor(2) as pool:
        there = list(pool.map(_digest, seeds))
    assert here == there


def test_a_printed_schedule_with_seeks_and_readers_replays_to_the_same_trace() -> None:
    original = next(r for seed in range(70_000, 70_100) if (r := run(seed, types=parse_type_mix("Shared")))
                    and r.coverage["seeks"] and r.coverage["reader_deliveries"])
    options, steps = read_schedule_file(original.schedule_text())
    assert options == original.options
    replayed = run(0, schedule=steps, options=options)
    assert replayed.ok
    assert replayed.trace_digest == original.trace_digest


def test_the_command_line_takes_a_type_mix() -> None:
    out = subprocess.run([sys.executable, "-m", "magnetar.testing.sim", "--seed", "12", "--schedules", "4",
                          "--types", "Exclusive,Shared=2"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "seed 12 --types Exclusive=1,Shared=2"
    assert '"violations": 0' in out[-1]
    assert "runs_Key_Shared" not in out[-1]


# -- the checkers have teeth ---------------------------------------------------------------
def _violations(sub_types: str) -> list[RunResult]:
    types = parse_type_mix(sub_types) if sub_types else ALL_TYPES
    return [r for seed in MUTANT_SEEDS if not (r := run(seed, types=types)).ok]


def test_a_shared_dispatcher_that_drops_a_message_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that leaves gives back all but its first pending entry: that one is lost."""
    def remove_consumer(self: MultipleConsumersDispatcher, consumer: Consumer, now_ms: int) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            for pos in list(consumer.take_all_pending())[1:]:
                self.replay.add(pos)
            self.dispatch(now_ms)
    monkeypatch.setattr(MultipleConsumersDispatcher, "remove_consumer", remove_consumer)
    failed = _violations("Shared")
    assert failed and all("never acknowledged" in (r.violation or "") for r in failed), failed[:1]


def test_an_exclusive_dispatcher_that_does_not_rewind_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redelivered entries must come again, in order, before anything newer."""
    def redeliver_pending(self: SingleActiveConsumerDispatcher, consumer: Consumer) -> None:
        consumer.take_all_pending()
    monkeypatch.setattr(SingleActiveConsumerDispatcher, "_redeliver_pending", redeliver_pending)
    failed = _violations("Exclusive,Failover")
    assert any("before the earlier" in (r.violation or "") for r in failed), failed[:1]


def test_a_failover_dispatcher_that_picks_the_wrong_consumer_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def choose(self: SingleActiveConsumerDispatcher) -> Consumer | None:
        return max(self.consumers, key=lambda c: c.consumer_name) if self.consumers else None
    monkeypatch.setattr(SingleActiveConsumerDispatcher, "_choose", choose)
    failed = _violations("Failover")
    assert any("active" in (r.violation or "") for r in failed), failed[:1]


def test_a_reader_that_skips_an_entry_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    read = Dispatcher.next_unread

    def next_unread(self: Dispatcher) -> Position | None:
        pos = read(self)
        if pos is not None and pos.entry_id == 3 and not self.sub.durable:
            return read(self)
        return pos
    monkeypatch.setattr(Dispatcher, "next_unread", next_unread)
    failed = _violations("Exclusive,Shared")
    assert failed and all("reader" in (r.violation or "") for r in failed), failed[:1]


def test_a_seek_that_keeps_acknowledgements_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a seek every entry after the new position is delivered again, acked or not."""
    def reset(self: Cursor, mark_delete: Position) -> None:
        self.mark_delete = mark_delete
        self.version += 1
    monkeypatch.setattr(Cursor, "reset", reset)
    failed = _violations("")
    assert failed, "a seek that keeps acknowledgements went unnoticed"
    assert all("before the earlier" in (r.violation or "") for r in failed), failed[:1]
