"""The alarm of the broker's one timer: a single ``loop.call_at`` at the earliest deadline
of core's :class:`~magnetar.core.broker.broker_timers.BrokerTimers`.

Core tells the alarm when its earliest deadline moves earlier (``alarm``); when the
alarm rings it reads the clock, calls ``on_timer(now)`` and re-arms at the deadline core
returns. Every other deadline of the broker's work is an owner in core's queue: the
delayed-delivery tick, Key_Shared unblocking, cursor persistence and the topic sweeps,
each connection's keep-alive, credential check and publish throttle
(:class:`~magnetar.core.broker.deadlines.Deadlines`), and the TLS certificate check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.server.clock import now_ms
from magnetar.server.loop_lag import LoopLag

log = logging.getLogger("magnetar.timer")


class TimerAlarm:
    def __init__(self, timers: BrokerTimers, clock_ms: Callable[[], int] = now_ms) -> None:
        self.timers = timers
        self.clock_ms = clock_ms
        self.loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._at_ms: int | None = None
        #: when the armed ring is due, on the monotonic clock: how late it rang is the loop's lag
        self._due = 0.0
        self.lag: LoopLag | None = None
        #: whether clients have work in hand (the loop's activity): background owners wait
        self.busy: Callable[[], bool] | None = None
        timers.alarm = self.arm

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        at_ms = self.timers.next_deadline_ms()
        if at_ms is not None:
            self._arm(at_ms)

    def arm(self, at_ms: int) -> None:
        """Ring at ``at_ms`` unless an earlier ring is already set."""
        if self._at_ms is not None and self._at_ms <= at_ms:
            return
        self._arm(at_ms)

    def _arm(self, at_ms: int) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = max(0, at_ms - self.clock_ms()) / 1000
        self._at_ms = at_ms
        self._due = time.monotonic() + delay_s
        self._handle = loop.call_at(loop.time() + delay_s, self._ring)

    def _ring(self) -> None:
        self._handle = self._at_ms = None
        started, due = time.monotonic(), self._due
        try:
            at_ms = self.timers.on_timer(self.clock_ms(), self.busy is not None and self.busy())
        finally:
            if self.lag is not None:
                self.lag.rang(started - due, started, time.monotonic(), self.timers.ran)
            for owner, exc in self.timers.failures:
                log.error("timer work of %r failed", owner, exc_info=exc)
            self.timers.failures.clear()
        if at_ms is not None:
            self.arm(at_ms)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._at_ms = None
        self.loop = None
