"""Periodic checks over the loaded topics visit them a slice per timer ring, so no ring
holds the event loop for the whole walk, and still visit every topic once per period."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.broker.broker_timers import BACKGROUND_HOLD_MS, BrokerTimers, PeriodicTask
from magnetar.core.broker.topic_sweep import SLICE_SIZE, TopicSweep
from magnetar.core.names import TopicName
from magnetar.core.topics.topic import Topic
from magnetar.storage.memory_ledger import MemoryLedger


def loaded(count: int) -> dict[str, Topic]:
    topics = {}
    for i in range(count):
        name = f"persistent://public/default/t{i}"
        topics[name] = Topic(TopicName.parse(name), MemoryLedger(name), BrokerConfig())
    return topics


def run_until(timers: BrokerTimers, end_ms: int) -> list[int]:
    """Ring the timer at each deadline up to ``end_ms``; the ring times."""
    rings = []
    deadline = timers.next_deadline_ms()
    while deadline is not None and deadline <= end_ms:
        rings.append(deadline)
        timers.on_timer(deadline)
        deadline = timers.next_deadline_ms()
    return rings


class Visits:
    def __init__(self) -> None:
        self.slices: list[tuple[int, list[str]]] = []

    def __call__(self, now_ms: int, topics: Sequence[Topic]) -> None:
        self.slices.append((now_ms, [str(t.name) for t in topics]))


@given(count=st.integers(0, 60), slice_size=st.integers(1, 25))
def test_every_topic_is_visited_once_per_period_in_slices(count: int, slice_size: int) -> None:
    timers, topics, visits = BrokerTimers(), loaded(count), Visits()
    TopicSweep(timers, 10_000, topics, visits, slice_size=slice_size).start(0)
    run_until(timers, 10_000 + 1_000)
    visited = [name for _, names in visits.slices for name in names]
    assert sorted(visited) == sorted(topics)
    assert all(len(names) <= slice_size for _, names in visits.slices)
    assert len(visits.slices) == -(-count // slice_size)


def test_the_next_sweep_starts_one_period_after_the_previous_started() -> None:
    timers, visits = BrokerTimers(), Visits()
    TopicSweep(timers, 1_000, loaded(10), visits, slice_size=3).start(0)
    run_until(timers, 2_500)
    assert [at for at, _ in visits.slices] == [1_000, 1_001, 1_002, 1_003, 2_000, 2_001, 2_002, 2_003]


def test_a_topic_unloaded_or_replaced_during_a_sweep_is_skipped() -> None:
    timers, topics, visits = BrokerTimers(), loaded(6), Visits()
    TopicSweep(timers, 1_000, topics, visits, slice_size=2).start(0)
    timers.on_timer(1_000)  # first slice: t0, t1
    del topics["persistent://public/default/t3"]
    replaced = "persistent://public/default/t4"
    topics[replaced] = Topic(TopicName.parse(replaced), MemoryLedger(replaced), BrokerConfig())
    run_until(timers, 1_900)
    visited = [name for _, names in visits.slices for name in names]
    assert visited == [f"persistent://public/default/t{i}" for i in (0, 1, 2, 5)]


def test_a_failing_visit_does_not_stop_the_sweep() -> None:
    timers, topics = BrokerTimers(), loaded(4)
    seen: list[str] = []

    def visit(now_ms: int, chunk: Sequence[Topic]) -> None:
        seen.extend(str(t.name) for t in chunk)
        if len(seen) % 4 == 2:
            raise RuntimeError("a bug in one check")
    TopicSweep(timers, 1_000, topics, visit, slice_size=2).start(0)
    run_until(timers, 2_100)
    assert len(timers.failures) == 2  # the first slice of each sweep
    assert len(seen) == 8


@pytest.mark.parametrize("count", [0, 1, 450])
def test_the_core_checks_run_as_sweeps(count: int) -> None:
    core = BrokerCore(BrokerConfig(retentionCheckIntervalInSeconds=1))
    core.topics.update(loaded(count))
    core.retention_check.start(0)
    rings = run_until(core.timers, 1_999)
    assert rings == [1_000 + i for i in range(max(1, -(-count // SLICE_SIZE)))]


def test_a_sweep_waits_while_clients_have_work_in_hand_but_never_longer_than_the_hold() -> None:
    """A slice run while a publish's sync report waits for the loop holds that publish;
    a sweep is put off while clients have work, a millisecond at a time, at most
    BACKGROUND_HOLD_MS in a row, so it still ends under any load."""
    timers, visits, others = BrokerTimers(), Visits(), []
    TopicSweep(timers, 1_000, loaded(3), visits, slice_size=1).start(0)
    PeriodicTask(timers, 1_000, lambda now: others.append(now)).start(0)
    for now in range(1_000, 1_000 + BACKGROUND_HOLD_MS):
        assert timers.next_deadline_ms() == now
        timers.on_timer(now, clients_waiting=True)
        assert visits.slices == []  # put off
    assert others == [1_000]  # a task clients may wait for is not
    timers.on_timer(1_000 + BACKGROUND_HOLD_MS, clients_waiting=True)  # held long enough: runs anyway
    assert [at for at, _ in visits.slices] == [1_000 + BACKGROUND_HOLD_MS]
    now = timers.next_deadline_ms()
    assert now is not None
    timers.on_timer(now, clients_waiting=True)  # the hold starts again for the next slice
    assert len(visits.slices) == 1
    timers.on_timer(now + 1, clients_waiting=False)  # an idle loop: at once
    assert len(visits.slices) == 2


def test_sweeps_due_together_take_turns_one_slice_per_ring() -> None:
    timers, first, second = BrokerTimers(), Visits(), Visits()
    topics = loaded(2)
    TopicSweep(timers, 1_000, topics, first, slice_size=1).start(0)
    TopicSweep(timers, 1_000, topics, second, slice_size=1).start(0)
    rings = run_until(timers, 1_010)
    assert rings[:4] == [1_000, 1_001, 1_002, 1_003]
    slices = sorted([(at, "first") for at, _ in first.slices] + [(at, "second") for at, _ in second.slices])
    assert [at for at, _ in slices] == [1_000, 1_001, 1_002, 1_003]  # one slice a ring
    assert [who for _, who in slices] == ["first", "second", "first", "second"]
