"""How a scrape's work on the event loop leaves room for everything else.

A ``/metrics`` scrape reads live state on the event loop (state lives there), a slice at
a time. Yielding between slices with ``sleep(0)`` is not enough on its own: the loop goes
straight on to the next slice, and a publish's receipt, waiting for the group-commit
thread (which needs the interpreter lock after each fdatasync) and then for the loop,
waits behind it. At 10,000 topics, publishes of another client while the scrape read its
topics had p50 1.6 ms and p99 4.6 ms with back-to-back slices, 0.5 and 0.8 ms without a
scrape (``bench/metrics_bench.py``).

Slices on a timer (0.15 ms of work, then 1 ms of sleep) brought that to p99 1.0 to 1.2 ms,
and no shorter slice or longer sleep did better: the timer is due when the loop next
wakes, which is for a publish, so slices landed inside publishes (see
:mod:`magnetar.server.loop_activity`). So, given the loop's :class:`Activity`, a slice
starts when the loop is idle (at once, or as soon as the sync it waits for is reported and
its replies written) and ends as soon as it is not, or after :data:`QUIET_SLICE_S`. Only a
loop that stays busy for :data:`FORCE_AFTER_S` gets a slice anyway, of
:data:`SLICE_BUSY_S` that does not give way, so a scrape ends under any load. Without an
activity to ask (tests), slices are timed: :data:`SLICE_BUSY_S` of work, then
:data:`SLICE_PAUSE_S` of sleep. (uvloop's timers count whole milliseconds: a shorter
sleep is no sleep at all.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

#: the longest a slice that does not give way runs on the event loop
SLICE_BUSY_S = 0.00015
#: the event loop's rest after a timed slice; the longest wait for a sync's report
SLICE_PAUSE_S = 0.001
#: the longest a slice started on an idle loop runs while nothing arrives
QUIET_SLICE_S = 0.001
#: how long a scrape waits for an idle loop before it takes a slice anyway
FORCE_AFTER_S = 0.005


class Activity(Protocol):
    """The loop's client work, as :class:`magnetar.server.loop_activity.LoopActivity` tells it."""

    def busy(self) -> bool: ...

    async def next_settled(self, timeout_s: float) -> None: ...


class ScrapePacer:
    """Call :meth:`turn` after each small piece of work: it rests when the slice is over."""

    def __init__(self, activity: Activity | None = None, busy_s: float = SLICE_BUSY_S,
                 pause_s: float = SLICE_PAUSE_S, clock: Callable[[], float] = time.perf_counter) -> None:
        self.activity = activity
        self.busy_s = busy_s
        self.pause_s = pause_s
        self.clock = clock
        self.slice_started = clock()
        self.pauses = 0
        #: slices that had to be taken from a busy loop
        self.forced = 0
        self._budget = busy_s
        self._gives_way = False

    def due(self) -> bool:
        """Whether the slice is over: its time is up, or it gives way and the loop has work.
        (A ``sched_yield`` here, so that a client thread woken on the loop's core ran at
        once, made publishes slower while topics were read, not faster: p99 0.98 / 1.07 /
        1.01 ms against 0.80 / 0.94 / 0.85 without it and 0.72 / 0.84 / 0.80 without a
        scrape, at 10,000 topics, interleaved in one broker; without topic-level series,
        0.87 against 0.89, no difference.)"""
        if self.clock() - self.slice_started >= self._budget:
            return True
        return self._gives_way and self.activity is not None and self.activity.busy()

    async def turn(self) -> None:
        if self.due():
            await self.rest()

    async def rest(self) -> None:
        if self.activity is None:
            await asyncio.sleep(self.pause_s)
        else:
            await self._until_idle(self.activity)
        self.pauses += 1
        self.slice_started = self.clock()

    async def _until_idle(self, activity: Activity) -> None:
        waiting_since = self.clock()
        await asyncio.sleep(0)  # the loop takes in what ended the slice
        while True:
            if not activity.busy():
                await asyncio.sleep(0)  # replies gathered just now are written out
                if not activity.busy():
                    self._budget, self._gives_way = QUIET_SLICE_S, True
                    return
            if self.clock() - waiting_since >= FORCE_AFTER_S:
                self._budget, self._gives_way = self.busy_s, False
                self.forced += 1
                return
            await activity.next_settled(self.pause_s)
