"""How late the event loop is: the broker's own measure of its pauses.

The broker's one timer (:class:`~magnetar.server.timer_alarm.TimerAlarm`) tells this, at
each ring, how late it rang (when it ran minus when it was due) and how long the ring's
own work took; a heartbeat through the same timer makes it ring while nothing else is due:
every :data:`HEARTBEAT_MS` while the loop's thread is busy, every :data:`IDLE_HEARTBEAT_MS`
while it is not (a loop waiting for clients has nothing to stall it, and each ring that
wakes it costs CPU: at 10 ms always, an idle broker spent 0.17 s of CPU per 10 s on them,
against 0.02 s without). A ring late by L means the loop was held for at least about
L, by whatever ran before it: nothing is done per frame or per message.

What held it is named where it can be known cheaply:

- a garbage collection whose start and stop (``gc.callbacks``) fall in the late window;
- the timer's own work (a ring longer than the threshold names the owners it ran: a
  sweep's check, cursor persistence, ...);
- otherwise, by the CPU time spent since the previous ring (two clock reads per ring): the
  loop's own thread busy (a connection's frames, HTTP, a scrape slice), other threads of the
  process busy while the loop waited for the interpreter lock (the group commit, a worker
  thread), or neither: the loop's thread was off the CPU (the process not scheduled on a
  shared machine, or a call that waited on the kernel: a disk, page faults).

Exported on ``/metrics`` (``magnetar_event_loop_lag_seconds``, a histogram of lateness,
and ``magnetar_event_loop_longest_stall_seconds``, the longest stall over the last
interval or two); a stall longer than ``loopStallThresholdMillis`` is logged, the first
at once and then at most once per :data:`INTERVAL_S`, the longest since the last line.
"""

from __future__ import annotations

import bisect
import gc
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from magnetar.core.broker.broker_timers import BrokerTimers, PeriodicTask

log = logging.getLogger("magnetar.loop")

#: the heartbeat's period while the loop is busy: a stall is seen to within about this much
HEARTBEAT_MS = 10
#: ...and while it is idle
IDLE_HEARTBEAT_MS = 100
#: the share of the time since the last heartbeat the loop's thread spent on the CPU above
#: which it is busy
BUSY_SHARE = 0.02
#: the longest-stall gauge covers the current interval and the one before; log lines are
#: at most one per interval
INTERVAL_S = 10.0
#: upper bounds of the lateness histogram's buckets (seconds)
BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def owner_name(owner: object) -> str:
    """A timer owner by what it runs: a periodic task's or a sweep's function (a lambda by
    the names it calls), else its class."""
    work = getattr(owner, "run", None) or getattr(owner, "visit", None)
    name = getattr(work, "__qualname__", None)
    if not isinstance(name, str):
        return type(owner).__qualname__
    code = getattr(work, "__code__", None)
    if name.endswith("<lambda>") and code is not None and code.co_names:
        return f"{name} calling {code.co_names[0]}"
    return name


class Stall:
    __slots__ = ("seconds", "cause")

    def __init__(self, seconds: float, cause: str) -> None:
        self.seconds = seconds
        self.cause = cause


class LoopLag:
    def __init__(self, threshold_ms: int, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], CpuTimes] | None = None) -> None:
        """``threshold_ms``: stalls longer than this are logged (0: none is). ``cpu()``: the
        loop thread's CPU times so far (call it on the loop's thread)."""
        self.threshold_s = threshold_ms / 1000
        self.clock = clock
        self._schedule: ThreadSchedule | None = None
        if cpu is None:
            self._schedule = ThreadSchedule()
            cpu = self._schedule.read
        self.cpu = cpu
        self._cpu_at_last_ring = CpuTimes(0.0, 0.0, 0.0)
        #: when the last heartbeat rang, and the loop thread's CPU time then (as of the ring before)
        self._heartbeat_at = self._heartbeat_cpu = 0.0
        #: lateness histogram: counts per bucket (the last one: above every bound), sum
        self.bucket_counts = [0] * (len(BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0
        #: stalls longer than the threshold, since start
        self.stalls_over_threshold = 0
        self._current: Stall | None = None
        self._previous: Stall | None = None
        self._interval_end = clock() + INTERVAL_S
        #: the longest stall not logged yet, and how many over the threshold it stands for
        self._unlogged: Stall | None = None
        self._unlogged_count = 0
        self._next_log_at = 0.0
        #: the last garbage collection: when it started and stopped, and its generation
        self._gc_started = 0.0
        self._gc_cpu_started = 0.0
        #: the last collection: started, stopped, generation, CPU seconds of the loop's thread
        self._gc_window = (0.0, 0.0, -1, 0.0)
        self._installed = False
        #: rings are measured from begin() on: start-up (imports, listeners) holds the loop
        #: for seconds before any client may connect, which is no stall a client sees
        self.measuring = False

    def begin(self) -> None:
        """Measure from now on, from nothing."""
        self.measuring = True
        self._cpu_at_last_ring = self.cpu()
        self.bucket_counts = [0] * (len(BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0
        self.stalls_over_threshold = 0
        self._current = self._previous = self._unlogged = None
        self._unlogged_count = 0
        self._next_log_at = 0.0
        self._interval_end = self.clock() + INTERVAL_S

    # -- wiring ----------------------------------------------------------------------
    def start(self, timers: BrokerTimers, now_ms: int) -> None:
        PeriodicTask(timers, IDLE_HEARTBEAT_MS, self._heartbeat).start(now_ms)
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def stop(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False
        if self._schedule is not None:
            self._schedule.close()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if not self.measuring:
            return
        if phase == "start":
            self._gc_started, self._gc_cpu_started = self.clock(), self.cpu().loop
        else:
            self._gc_window = (self._gc_started, self.clock(), int(info.get("generation", -1)),
                               self.cpu().loop - self._gc_cpu_started)

    def _heartbeat(self, now_ms: int) -> int | None:
        """The next heartbeat sooner than the idle period while the loop is busy."""
        now = self.clock()
        self._roll(now)
        loop_cpu = self._cpu_at_last_ring.loop
        busy = loop_cpu - self._heartbeat_cpu > BUSY_SHARE * (now - self._heartbeat_at)
        self._heartbeat_at, self._heartbeat_cpu = now, loop_cpu
        return now_ms + HEARTBEAT_MS if busy else None

    # -- what the timer reports ------------------------------------------------------------
    def rang(self, late_s: float, started: float, ended: float, ran: Sequence[object]) -> None:
        """A ring of the timer: due ``late_s`` before ``started``; its work took until ``ended``."""
        if not self.measuring:
            return
        late_s = max(0.0, late_s)
        self.bucket_counts[bisect.bisect_left(BUCKETS_S, late_s)] += 1
        self.count += 1
        self.sum_s += late_s
        cpu = self.cpu()
        spent = CpuTimes(*(now - before for now, before in zip(cpu, self._cpu_at_last_ring, strict=True)))
        self._cpu_at_last_ring = cpu
        work_s = ended - started
        stall_s = max(late_s, work_s)
        if stall_s > 0.0:
            if work_s > late_s and spent.loop * 2 >= work_s:
                names = ", ".join(sorted({owner_name(o) for o in ran}))
                cause = f"timer work: {names}" if names else "timer work"
            else:
                cause = self._cause(started - late_s, started + work_s, spent)
            self._stall(stall_s, cause)
        self._roll(ended)

    def _cause(self, window_start: float, window_end: float, spent: CpuTimes) -> str:
        """What held the loop from ``window_start`` to ``window_end``, given the CPU times
        spent since the ring before."""
        stall_s = window_end - window_start
        gc_start, gc_end, generation, gc_cpu = self._gc_window
        collection = ""
        if generation >= 0 and gc_end > window_start and gc_start < window_end:
            collection = (f"garbage collection of generation {generation} ({(gc_end - gc_start) * 1000:.1f} ms, "
                          f"{gc_cpu * 1000:.1f} ms of CPU)")
            if gc_cpu * 2 >= stall_s:
                return collection
        others = max(0.0, spent.process - spent.loop)  # two clocks: a little apart at times
        if spent.loop * 2 >= stall_s:
            cause = "work on the loop (connections' frames, HTTP, scrape slices)"
        elif spent.waiting_for_cpu * 2 >= stall_s:
            cause = "the loop's thread waiting for a CPU (the machine busy)"
        elif others * 2 >= stall_s:
            cause = "other threads holding the interpreter lock (group commit, worker threads)"
        else:
            cause = "the loop's thread off the CPU (the process stopped, or waiting on the kernel: disk, page faults)"
        figures = (f"{spent.loop * 1000:.1f} ms of CPU on the loop's thread, {others * 1000:.1f} ms on others, "
                   f"{spent.waiting_for_cpu * 1000:.1f} ms waiting for a CPU")
        return f"{cause}: {figures}" + (f"; a {collection} in it" if collection else "")

    def _stall(self, seconds: float, cause: str) -> None:
        current = self._current
        if current is None or seconds > current.seconds:
            self._current = Stall(seconds, cause)
        if self.threshold_s <= 0 or seconds <= self.threshold_s:
            return
        self.stalls_over_threshold += 1
        self._unlogged_count += 1
        if self._unlogged is None or seconds > self._unlogged.seconds:
            self._unlogged = Stall(seconds, cause)

    def _roll(self, now: float) -> None:
        if now >= self._interval_end:
            self._previous, self._current = self._current, None
            self._interval_end = now + INTERVAL_S
        stall = self._unlogged
        if stall is not None and now >= self._next_log_at:
            log.warning("event loop stalled %.1f ms (the longest of %d over %.0f ms since the last report): %s",
                        stall.seconds * 1000, self._unlogged_count, self.threshold_s * 1000, stall.cause)
            self._unlogged, self._unlogged_count = None, 0
            self._next_log_at = now + INTERVAL_S

    # -- what /metrics reads -----------------------------------------------------------
    def longest_stall_s(self) -> float:
        """The longest stall of the current interval and the one before."""
        return max((s.seconds for s in (self._current, self._previous) if s is not None), default=0.0)

    def cumulative_buckets(self) -> list[tuple[float, int]]:
        """(upper bound, count of rings at most that late), ending with +Inf."""
        total, out = 0, []
        for bound, count in zip((*BUCKETS_S, float("inf")), self.bucket_counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class CpuTimes(NamedTuple):
    """Seconds: the loop thread's CPU time, the process's, and the time the loop's thread
    was ready to run but waited for a CPU."""

    loop: float
    process: float
    waiting_for_cpu: float


class ThreadSchedule:
    """The calling thread's CPU times, from Linux's ``/proc/thread-self/schedstat`` (run
    time, run-queue wait) read with one ``pread`` of a descriptor kept open; elsewhere
    ``thread_time`` with no wait known. Opened by the thread it reads, on first use."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._tried = False

    def read(self) -> CpuTimes:
        if not self._tried:
            self._tried = True
            try:
                self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            except OSError:
                self._fd = None
        if self._fd is not None:
            try:
                fields = os.pread(self._fd, 128, 0).split()
                return CpuTimes(int(fields[0]) / 1e9, time.process_time(), int(fields[1]) / 1e9)
            except (OSError, ValueError, IndexError):
                pass
        return CpuTimes(time.thread_time(), time.process_time(), 0.0)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
