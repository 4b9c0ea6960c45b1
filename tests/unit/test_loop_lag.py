"""LoopLag on a hand-driven clock: what it counts, names and logs for the timer's rings."""

from __future__ import annotations

import logging
import time

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.broker.broker_timers import BrokerTimers, PeriodicTask
from magnetar.server.loop_lag import INTERVAL_S, CpuTimes, LoopLag, ThreadSchedule, owner_name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        #: CPU seconds of the loop's thread and of the process, and the loop's wait for a CPU
        self.loop_cpu = self.process_cpu = self.waiting = 0.0

    def __call__(self) -> float:
        return self.now

    def cpu(self) -> CpuTimes:
        return CpuTimes(self.loop_cpu, self.process_cpu, self.waiting)


def lag_on(clock: Clock, threshold_ms: int = 20) -> LoopLag:
    lag = LoopLag(threshold_ms, clock, clock.cpu)
    lag.begin()
    return lag


def sweep_check(now_ms: int) -> None:
    pass


def test_lateness_goes_into_the_histogram_and_the_longest_stall() -> None:
    clock = Clock()
    lag = lag_on(clock, 20)
    lag.rang(0.0004, 1000.0, 1000.0, [])
    lag.rang(0.030, 1000.1, 1000.1, [])
    lag.rang(-0.001, 1000.2, 1000.2, [])  # rang early: counted as on time
    buckets = dict(lag.cumulative_buckets())
    assert buckets[0.001] == 2
    assert buckets[0.02] == 2
    assert buckets[0.05] == 3
    assert buckets[float("inf")] == 3
    assert lag.sum_s == pytest.approx(0.0304)
    assert lag.longest_stall_s() == pytest.approx(0.030)
    assert lag.stalls_over_threshold == 1


def test_the_longest_stall_covers_two_intervals_then_goes() -> None:
    clock = Clock()
    lag = lag_on(clock, 20)
    lag.rang(0.1, 1000.0, 1000.0, [])
    clock.now = 1000.0 + INTERVAL_S
    lag.rang(0.0, clock.now, clock.now, [])
    assert lag.longest_stall_s() == pytest.approx(0.1)
    clock.now += INTERVAL_S
    lag.rang(0.0, clock.now, clock.now, [])
    assert lag.longest_stall_s() == 0.0


def test_a_long_ring_names_the_work_it_ran(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock)
    task = PeriodicTask(BrokerTimers(), 1000, sweep_check)
    clock.loop_cpu = clock.process_cpu = 0.05
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.0, 1000.0, 1000.05, [task])
    assert "stalled 50.0 ms" in caplog.text
    assert "timer work: sweep_check" in caplog.text


def test_a_late_ring_over_a_garbage_collection_names_it(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock, 20)
    clock.now = 1000.010
    lag._on_gc("start", {"generation": 2})
    clock.now = 1000.090
    clock.loop_cpu = 0.075
    lag._on_gc("stop", {"generation": 2, "collected": 0})
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.095, 1000.1, 1000.1, [])
    assert "garbage collection of generation 2 (80.0 ms, 75.0 ms of CPU)" in caplog.text


def test_stalls_are_logged_at_most_once_per_interval_with_the_longest(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock, 20)
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.030, 1000.0, 1000.0, [])
        lag.rang(0.060, 1001.0, 1001.0, [])
        lag.rang(0.040, 1002.0, 1002.0, [])
        lag.rang(0.010, 1003.0, 1003.0, [])  # under the threshold: neither logged nor counted
        assert len(caplog.records) == 1
        clock.now = 1000.0 + INTERVAL_S
        lag.rang(0.0, clock.now, clock.now, [])
    assert len(caplog.records) == 2
    assert "stalled 60.0 ms (the longest of 2 over 20 ms" in caplog.records[1].getMessage()
    assert lag.stalls_over_threshold == 3


def test_threshold_zero_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    lag = lag_on(Clock(), 0)
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(1.0, 1000.0, 1000.0, [])
    assert not caplog.records
    assert lag.longest_stall_s() == 1.0


@pytest.mark.parametrize("value", ["-1", "soon", "2.5"])
def test_bad_stall_thresholds_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="loopStallThresholdMillis"):
        BrokerConfig().with_overrides({"loopStallThresholdMillis": value})


def test_a_short_collection_in_a_long_stall_is_not_blamed_for_it(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock, 20)
    lag._on_gc("start", {"generation": 0})
    clock.now = 1000.005
    clock.loop_cpu = 0.005
    lag._on_gc("stop", {"generation": 0})
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.5, 1000.4, 1000.4, [])
    assert "the loop's thread off the CPU (the process stopped" in caplog.text
    assert "; a garbage collection of generation 0 (5.0 ms, 5.0 ms of CPU) in it" in caplog.text


@pytest.mark.parametrize(("loop_cpu", "process_cpu", "waiting", "cause"), [
    (0.09, 0.09, 0.0, "work on the loop (connections' frames, HTTP, scrape slices): 90.0 ms of CPU on the loop's "
                      "thread"),
    (0.01, 0.09, 0.0, "other threads holding the interpreter lock (group commit, worker threads): 10.0 ms of CPU "
                      "on the loop's thread, 80.0 ms on others"),
    (0.01, 0.02, 0.08, "the loop's thread waiting for a CPU (the machine busy)"),
    (0.01, 0.02, 0.0, "the loop's thread off the CPU (the process stopped, or waiting on the kernel"),
])
def test_the_cpu_time_since_the_ring_before_says_who_held_the_loop(
        loop_cpu: float, process_cpu: float, waiting: float, cause: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock)
    clock.loop_cpu, clock.process_cpu, clock.waiting = loop_cpu, process_cpu, waiting
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.1, 1000.1, 1000.1, [])
    assert cause in caplog.text


def test_nothing_is_measured_before_begin() -> None:
    lag = LoopLag(20, Clock())
    lag.rang(2.0, 1000.0, 1000.0, [])
    assert lag.count == 0
    assert lag.longest_stall_s() == 0.0
    assert lag.stalls_over_threshold == 0


def test_a_long_ring_without_cpu_is_not_blamed_on_its_work(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock)
    clock.waiting = 0.05
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.0, 1000.0, 1000.05, [PeriodicTask(BrokerTimers(), 1000, sweep_check)])
    assert "waiting for a CPU" in caplog.text
    assert "sweep_check" not in caplog.text


def test_the_thread_schedule_reads_this_threads_cpu_time() -> None:
    schedule = ThreadSchedule()
    before = schedule.read()
    deadline = time.thread_time() + 0.02
    while time.thread_time() < deadline:
        pass
    after = schedule.read()
    assert after.loop - before.loop >= 0.015
    assert after.process >= after.loop - 0.001
    assert after.waiting_for_cpu >= before.waiting_for_cpu
    schedule.close()
    schedule.close()  # twice: nothing left to close


def test_a_collection_that_spent_little_cpu_is_not_blamed(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    lag = lag_on(clock)
    lag._on_gc("start", {"generation": 1})
    clock.now, clock.loop_cpu, clock.process_cpu, clock.waiting = 1000.05, 0.005, 0.005, 0.045
    lag._on_gc("stop", {"generation": 1})
    with caplog.at_level(logging.WARNING, "magnetar.loop"):
        lag.rang(0.05, 1000.05, 1000.05, [])
    assert "waiting for a CPU (the machine busy)" in caplog.text
    assert "a garbage collection of generation 1 (50.0 ms, 5.0 ms of CPU) in it" in caplog.text


def test_a_sweep_given_a_lambda_is_named_by_what_it_calls() -> None:
    timers = BrokerTimers()
    assert owner_name(PeriodicTask(timers, 10, sweep_check)) == "sweep_check"
    assert owner_name(PeriodicTask(timers, 10, lambda now: sweep_check(now))).endswith("<lambda> calling sweep_check")
    assert owner_name(timers) == "BrokerTimers"


def test_the_heartbeat_quickens_while_the_loop_is_busy() -> None:
    clock = Clock()
    lag = lag_on(clock)
    lag._heartbeat(0)
    clock.now += 0.1
    assert lag._heartbeat(100) is None  # idle: the period stands
    clock.loop_cpu = clock.process_cpu = 0.02
    lag.rang(0.0, clock.now, clock.now, [])
    clock.now += 0.1
    assert lag._heartbeat(200) == 210  # 20 ms of CPU in 100 ms: busy
