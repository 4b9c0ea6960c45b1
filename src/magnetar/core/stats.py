"""Counters and rates over a rolling window, as Pulsar's stats report them.

Rates are messages (and bytes) per second over the last window; time is passed in.
Latencies are counted in Pulsar's buckets and kept for quantiles: the shell measures
them, the stats and ``/metrics`` read them.
"""

from __future__ import annotations

import bisect
import datetime
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat

WINDOW_MS = 10_000
_WINDOW_S = WINDOW_MS / 1000
_IDLE = (0.0, 0.0)


@dataclass(slots=True)
class RateCounter:
    total_msgs: int = 0
    total_bytes: int = 0
    #: how many times ``add`` was called (entries, for counters fed once per entry)
    total_events: int = 0
    #: time of the last ``add``, 0 if never
    last_ms: int = 0
    #: (second, msgs, bytes) of the window's seconds; made at the first ``add``, as most
    #: counters of a loaded topic (its consumers' redeliveries, its expiries) never count
    #: anything, and each container is one more object for every garbage collection to walk
    _samples: deque[tuple[int, int, int]] | None = field(default=None, repr=False)

    def add(self, now_ms: int, msgs: int, size_bytes: int = 0, events: int = 1) -> None:
        self.total_msgs += msgs
        self.total_bytes += size_bytes
        self.total_events += events
        self.last_ms = now_ms
        bucket = now_ms // 1000
        samples = self._samples
        if samples is None:
            samples = self._samples = deque()
        if samples and samples[-1][0] == bucket:
            _, m, b = samples[-1]
            samples[-1] = (bucket, m + msgs, b + size_bytes)
        else:
            samples.append((bucket, msgs, size_bytes))
            self._trim(now_ms)

    def rate(self, now_ms: int) -> tuple[float, float]:
        """(messages/s, bytes/s) over the window ending now."""
        if self._samples is None:
            return _IDLE  # most counters of a loaded topic; a scrape asks for every one
        self._trim(now_ms)
        msgs = size = 0
        for _, m, b in self._samples or ():
            msgs += m
            size += b
        return msgs / _WINDOW_S, size / _WINDOW_S

    def recent_rate(self, now_ms: int) -> tuple[float, float]:
        """(messages/s, bytes/s) over the part of the window since the counter's oldest sample
        (at least one second): a counter that began counting a moment ago (a topic just
        loaded) shows its rate at once rather than ramping up over the window."""
        if self._samples is None:
            return _IDLE
        self._trim(now_ms)
        samples = self._samples or ()
        if not samples:
            return _IDLE
        span_s = min(_WINDOW_S, max(1.0, (now_ms - samples[0][0] * 1000) / 1000))
        return sum(m for _, m, _ in samples) / span_s, sum(b for _, _, b in samples) / span_s

    def _trim(self, now_ms: int) -> None:
        oldest = (now_ms - WINDOW_MS) // 1000
        samples = self._samples
        while samples and samples[0][0] <= oldest:
            samples.popleft()
        if samples is not None and not samples:
            self._samples = None


def iso_time(ms: int) -> str:
    """A wall-clock time as Pulsar's stats print it (``connectedSince``): UTC, to the millisecond."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


#: Pulsar's ``ENTRY_LATENCY_BUCKETS_USEC`` boundaries, in milliseconds, as its
#: ``pulsar_storage_write_latency_le_*`` series name them.
LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)
#: Label suffixes of those buckets, the last one for everything above 1 s.
LATENCY_BUCKET_NAMES: tuple[str, ...] = (
    "0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
#: How many recent publish latencies quantiles are computed over.
QUANTILE_SAMPLES_MAX = 8192
QUANTILES: tuple[float, ...] = (0.0, 0.5, 0.95, 0.99, 0.999, 0.9999, 1.0)
#: a topic's latency buckets as values: the count in each bucket, then count and sum (ms)
LatencyValues = tuple[float, ...]


@dataclass
class LatencyBuckets:
    """Cumulative counts per Pulsar latency bucket, plus count and sum (ms)."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKET_NAMES))
    count: int = 0
    sum_ms: float = 0.0

    def observe(self, latency_ms: float, count: int = 1) -> None:
        self.counts[bisect.bisect_left(LATENCY_BOUNDS_MS, latency_ms)] += count
        self.count += count
        self.sum_ms += latency_ms * count

    def values(self) -> LatencyValues:
        """(count per bucket..., count, sum in ms): a tuple, which the garbage collector
        stops tracking, unlike a copy of this object and its list."""
        return (*self.counts, self.count, self.sum_ms)


class LatencyQuantiles:
    """Quantiles over the most recent samples, with a running count and sum (seconds)."""

    def __init__(self, samples_max: int = QUANTILE_SAMPLES_MAX) -> None:
        self._samples: deque[float] = deque(maxlen=samples_max)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, latency_s: float, count: int = 1) -> None:
        samples = self._samples
        samples.extend(repeat(latency_s, min(count, samples.maxlen or count)))
        self.count += count
        self.sum_s += latency_s * count

    def quantiles(self) -> list[tuple[float, float]]:
        ordered = sorted(self._samples)
        if not ordered:
            return [(q, float("nan")) for q in QUANTILES]
        last = len(ordered) - 1
        return [(q, ordered[min(last, round(q * last))]) for q in QUANTILES]
