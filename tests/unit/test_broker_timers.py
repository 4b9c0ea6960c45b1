"""The broker's one timer: deadline order, replacement, periodic owners, failures."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.broker.broker_timers import BrokerTimers, PeriodicTask
from magnetar.core.broker.deadline_queue import DeadlineQueue


@dataclass(eq=False)
class Owner:
    fired: list[int] = field(default_factory=list)
    fail: bool = False

    def on_timer(self, now_ms: int) -> None:
        self.fired.append(now_ms)
        if self.fail:
            raise RuntimeError("boom")


def test_the_earlier_of_two_deadlines_wins_and_a_later_one_is_ignored() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.schedule("a", 50)
    q.schedule("a", 30)
    q.schedule("a", 70)
    assert q.next_deadline_ms() == 30
    assert q.pop_due(29) == []
    assert q.pop_due(30) == ["a"]
    assert q.next_deadline_ms() is None
    assert len(q) == 0


def test_replace_moves_a_deadline_later() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.schedule("a", 10)
    q.schedule("a", 40, replace=True)
    assert q.pop_due(20) == []
    assert q.deadline_of("a") == 40
    assert q.pop_due(40) == ["a"]


def test_cancelled_owners_never_come_due() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.schedule("a", 10)
    q.schedule("b", 20)
    q.cancel("a")
    assert q.next_deadline_ms() == 20
    assert q.pop_due(100) == ["b"]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000)), max_size=60), st.integers(0, 1000))
def test_pop_due_returns_exactly_the_owners_due_by_their_earliest_ask(asks: list[tuple[int, int]],
                                                                      now: int) -> None:
    q: DeadlineQueue[int] = DeadlineQueue()
    earliest: dict[int, int] = {}
    for owner, at in asks:
        q.schedule(owner, at)
        earliest[owner] = min(at, earliest.get(owner, at))
    due = q.pop_due(now)
    assert sorted(due) == sorted(o for o, at in earliest.items() if at <= now)
    assert [earliest[o] for o in due] == sorted(earliest[o] for o in due)
    left = [at for o, at in earliest.items() if at > now]
    assert q.next_deadline_ms() == (min(left) if left else None)


def test_the_shell_is_told_only_of_deadlines_earlier_than_the_armed_one() -> None:
    alarms: list[int] = []
    timers = BrokerTimers(alarms.append)
    a, b = Owner(), Owner()
    timers.wake_up(a, 100)
    timers.wake_up(b, 200)
    timers.wake_up(b, 50)
    assert alarms == [100, 50]
    assert timers.on_timer(60) == 100
    assert b.fired == [60] and a.fired == []
    assert timers.on_timer(100) is None
    assert a.fired == [100]


def test_a_failing_owner_does_not_stop_the_others() -> None:
    timers = BrokerTimers()
    bad, good = Owner(fail=True), Owner()
    timers.wake_up(bad, 10)
    timers.wake_up(good, 10)
    timers.on_timer(10)
    assert good.fired == [10]
    assert [owner for owner, _ in timers.failures] == [bad]


def test_a_periodic_task_runs_every_period_or_sooner_when_asked() -> None:
    timers = BrokerTimers()
    sooner: list[int | None] = [None, 1015, 900, None]
    ran: list[int] = []

    def run(now: int) -> int | None:
        ran.append(now)
        return sooner[len(ran) - 1]

    task = PeriodicTask(timers, 1000, run)
    task.start(0)
    assert timers.next_deadline_ms() == 1000
    timers.on_timer(1000)
    assert timers.next_deadline_ms() == 2000
    timers.on_timer(2000)
    assert timers.next_deadline_ms() == 2001  # 1015 is past: the next millisecond
    timers.on_timer(2001)
    # 900 is past too: never "now", which would spin
    assert timers.next_deadline_ms() == 2002
    assert ran == [1000, 2000, 2001]


def test_a_periodic_task_keeps_its_schedule_when_its_work_fails() -> None:
    timers = BrokerTimers()

    def run(now: int) -> int | None:
        raise OSError("disk full")

    PeriodicTask(timers, 500, run).start(0)
    timers.on_timer(500)
    assert timers.next_deadline_ms() == 1000
    assert len(timers.failures) == 1
