"""A scrape's work on the event loop rests once a slice's worth of time has gone by."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.admin.scrape_pacing import ScrapePacer


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
