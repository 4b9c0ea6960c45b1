"""The event loop's lag on ``/metrics`` (Magnetar's own series: Pulsar has none for it)."""

from __future__ import annotations

from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class LoopLagReadings(Protocol):
    """What the broker's loop-lag meter tells a scrape."""

    @property
    def sum_s(self) -> float: ...

    @property
    def stalls_over_threshold(self) -> int: ...

    def longest_stall_s(self) -> float: ...

    def cumulative_buckets(self) -> list[tuple[float, int]]: ...


def loop_lag_families(lag: LoopLagReadings, cluster: str) -> list[Metric]:
    labels = ["cluster"]
    histogram = HistogramMetricFamily(
        "magnetar_event_loop_lag_seconds",
        "How late the broker's timer rang on the event loop (at least every 10 ms while busy, 100 ms idle)",
        labels=labels)
    histogram.add_metric([cluster], [(floatToGoString(bound), count) for bound, count in lag.cumulative_buckets()],
                         lag.sum_s)
    longest = GaugeMetricFamily("magnetar_event_loop_longest_stall_seconds",
                                "The longest event-loop stall in the last 10 to 20 seconds", labels=labels)
    longest.add_metric([cluster], lag.longest_stall_s())
    stalls = CounterMetricFamily("magnetar_event_loop_stalls",
                                 "Event-loop stalls longer than loopStallThresholdMillis", labels=labels)
    stalls.add_metric([cluster], lag.stalls_over_threshold)
    return [histogram, longest, stalls]
