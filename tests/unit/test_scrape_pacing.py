"""A scrape's work on the event loop rests once a slice's worth of time has gone by."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.admin.scrape_pacing import FORCE_AFTER_S, SLICE_BUSY_S, ScrapePacer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.timeout(10)
def test_turns_inside_a_slice_do_not_rest_and_the_first_after_it_does() -> None:
    clock = Clock()
    pacer = ScrapePacer(busy_s=0.001, pause_s=0, clock=clock)

    async def work() -> list[int]:
        pauses = []
        for _ in range(4):  # 0.3 ms of work per step: a rest after the fourth step
            clock.now += 0.0003
            await pacer.turn()
            pauses.append(pacer.pauses)
        return pauses

    assert asyncio.run(work()) == [0, 0, 0, 1]


@pytest.mark.timeout(10)
def test_a_rest_is_a_wait_of_the_loop_not_only_a_yield() -> None:
    """sleep(0) would put the scrape straight back in the ready queue; a rest must leave
    the loop with nothing to run for its length, so it waits on I/O without the lock."""
    async def scenario() -> tuple[float, int]:
        pacer = ScrapePacer(busy_s=0, pause_s=0.002)
        started = time.perf_counter()
        for _ in range(5):
            await pacer.turn()
        return time.perf_counter() - started, pacer.pauses

    elapsed, pauses = asyncio.run(scenario())
    assert pauses == 5
    assert elapsed >= 5 * 0.002


class Activity:
    """The loop's client work as the test sets it; ``next_settled`` returns at once."""

    def __init__(self, clock: Clock, busy: bool = False) -> None:
        self.clock = clock
        self.is_busy = busy
        self.waits = 0
        #: the loop turns after which it stops being busy (None: never)
        self.busy_for: int | None = None

    def busy(self) -> bool:
        return self.is_busy

    async def next_settled(self, timeout_s: float) -> None:
        self.waits += 1
        self.clock.now += timeout_s
        if self.busy_for is not None and self.waits >= self.busy_for:
            self.is_busy = False


@pytest.mark.timeout(10)
def test_a_slice_on_an_idle_loop_gives_way_as_soon_as_a_client_has_work() -> None:
    clock = Clock()
    activity = Activity(clock)
    pacer = ScrapePacer(activity, clock=clock)

    async def scenario() -> tuple[bool, bool]:
        await pacer.rest()  # the loop is idle: a slice that gives way begins
        clock.now += 0.00005
        before = pacer.due()
        activity.is_busy = True  # a SEND arrived
        return before, pacer.due()

    assert asyncio.run(scenario()) == (False, True)
    assert pacer.forced == 0


@pytest.mark.timeout(10)
def test_a_rest_waits_for_the_loop_to_settle_before_the_next_slice() -> None:
    clock = Clock()
    activity = Activity(clock, busy=True)
    activity.busy_for = 2  # a sync in flight, reported after two waits
    pacer = ScrapePacer(activity, clock=clock)

    asyncio.run(pacer.rest())

    assert activity.waits == 2
    assert pacer.forced == 0 and pacer.pauses == 1


@pytest.mark.timeout(10)
def test_a_loop_that_stays_busy_gets_a_short_slice_anyway_that_does_not_give_way() -> None:
    """Under constant load a scrape still ends: after FORCE_AFTER_S it takes a slice of
    SLICE_BUSY_S that runs its length, busy loop or not."""
    clock = Clock()
    activity = Activity(clock, busy=True)
    pacer = ScrapePacer(activity, clock=clock)

    async def scenario() -> list[bool]:
        await pacer.rest()
        inside = [pacer.due() for _ in range(2)]
        clock.now += 2 * SLICE_BUSY_S
        return [*inside, pacer.due()]

    assert asyncio.run(scenario()) == [False, False, True]
    assert pacer.forced == 1
    assert clock.now >= FORCE_AFTER_S
