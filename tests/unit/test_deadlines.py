"""Several deadlines of one owner on the broker's one timer (a connection's keep-alive,
credential check and publish throttle): order, replacement, cancellation, closing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.core.broker.deadlines import Deadlines


def recorder(log: list[tuple[str, int]], name: str):  # type: ignore[no-untyped-def]
    return lambda now: log.append((name, now))


def test_the_owner_holds_its_earliest_deadline_and_each_runs_when_due() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []
    deadlines.set("keep-alive", 300, recorder(ran, "keep-alive"))
    deadlines.set("throttle", 100, recorder(ran, "throttle"))
    assert timers.next_deadline_ms() == 100
    assert timers.on_timer(99) == 100
    assert ran == []
    assert timers.on_timer(100) == 300
    assert ran == [("throttle", 100)]
    assert not deadlines.pending("throttle") and deadlines.pending("keep-alive")
    assert timers.on_timer(350) is None
    assert ran == [("throttle", 100), ("keep-alive", 350)]


def test_setting_a_name_again_replaces_its_deadline_later_or_earlier() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []
    deadlines.set("a", 100, recorder(ran, "a"))
    deadlines.set("a", 500, recorder(ran, "a"))
    assert timers.next_deadline_ms() == 500
    assert timers.on_timer(100) == 500 and ran == []
    deadlines.set("a", 200, recorder(ran, "a2"))
    assert timers.on_timer(200) is None
    assert ran == [("a2", 200)]


def test_a_deadline_that_sets_itself_again_runs_again() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[int] = []

    def tick(now: int) -> None:
        ran.append(now)
        deadlines.set("tick", now + 30, tick)
    deadlines.set("tick", 30, tick)
    for now in range(0, 100, 10):
        timers.on_timer(now)
    assert ran == [30, 60, 90]
    assert timers.next_deadline_ms() == 120


def test_cancel_and_close_leave_nothing_due_and_close_is_final() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []
    deadlines.set("a", 10, recorder(ran, "a"))
    deadlines.set("b", 20, recorder(ran, "b"))
    deadlines.cancel("a")
    assert deadlines.at_ms("a") is None and deadlines.at_ms("b") == 20
    assert timers.next_deadline_ms() == 20
    deadlines.close()
    deadlines.set("c", 30, recorder(ran, "c"))
    assert timers.next_deadline_ms() is None
    assert timers.on_timer(1000) is None
    assert ran == []
    assert not deadlines.pending("c")


def test_one_that_fails_is_reported_and_the_rest_still_run() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []

    def boom(now: int) -> None:
        raise RuntimeError("boom")
    deadlines.set("a", 10, boom)
    deadlines.set("b", 10, recorder(ran, "b"))
    timers.on_timer(10)
    assert [owner for owner, _ in timers.failures] == [deadlines]
    assert timers.next_deadline_ms() == 10  # what did not run is still due
    timers.on_timer(11)
    assert ran == [("b", 11)]


def test_a_deadline_moved_by_one_that_ran_before_it_waits_for_its_new_time() -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []
    deadlines.set("b", 10, recorder(ran, "b"))
    deadlines.set("a", 5, lambda now: deadlines.set("b", 50, recorder(ran, "b moved")))
    timers.on_timer(10)
    assert ran == []
    assert timers.on_timer(50) is None
    assert ran == [("b moved", 50)]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 1000)), min_size=1, max_size=30),
       st.lists(st.integers(0, 1200), min_size=1, max_size=10))
def test_each_name_runs_once_at_its_last_set_time_never_early(sets: list[tuple[str, int]],
                                                               rings: list[int]) -> None:
    timers = BrokerTimers()
    deadlines = Deadlines(timers)
    ran: list[tuple[str, int]] = []
    last: dict[str, int] = {}
    for name, at in sets:
        deadlines.set(name, at, recorder(ran, name))
        last[name] = at
    for now in sorted(rings):
        timers.on_timer(now)
    horizon = max(rings)
    assert sorted(name for name, _ in ran) == sorted(name for name, at in last.items() if at <= horizon)
    for name, now in ran:
        assert now >= last[name]
    remaining = [at for at in last.values() if at > horizon]
    assert timers.next_deadline_ms() == (min(remaining) if remaining else None)
