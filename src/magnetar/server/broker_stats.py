"""Latency and expiry figures the broker records for stats and ``/metrics``.

Publish latency is measured as Pulsar measures ``recordAddLatency``: from the append of
an entry to the moment storage reports it durable (the send receipt goes out then).
The group committer reports how long each ledger's fsync took from its worker thread,
so everything fed from there is guarded by a lock. Everything else runs on the event
loop thread.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

from magnetar.core.positions import Position

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


class BrokerStatsRecorder:
    def __init__(self) -> None:
        self._appended: dict[str, deque[tuple[Position, float]]] = {}
        self.write_latency: dict[str, LatencyBuckets] = {}
        self.publish_latency = LatencyQuantiles()
        self._lock = threading.Lock()
        self._ledger_write_latency: dict[str, LatencyBuckets] = {}

    # -- publish latency (event loop) ---------------------------------------------
    def appended(self, topic: str, positions: Iterable[Position]) -> None:
        pending = self._appended.get(topic)
        if pending is None:  # not setdefault: that would build a deque for every entry
            pending = self._appended[topic] = deque()
        now = time.perf_counter()
        pending.extend((pos, now) for pos in positions)

    def persisted(self, topic: str, upto: Position) -> None:
        pending = self._appended.get(topic)
        if not pending:
            return
        now = time.perf_counter()
        buckets = self.write_latency.setdefault(topic, LatencyBuckets())
        while pending and pending[0][0] <= upto:
            appended_at = pending.popleft()[1]
            count = 1  # the entries of one read were appended at the same time
            while pending and pending[0][1] == appended_at and pending[0][0] <= upto:
                pending.popleft()
                count += 1
            latency_s = now - appended_at
            buckets.observe(latency_s * 1000, count)
            self.publish_latency.observe(latency_s, count)

    # -- fsync latency (group-commit worker thread) ---------------------------------
    def ledger_synced(self, topic: str, seconds: float) -> None:
        with self._lock:
            self._ledger_write_latency.setdefault(topic, LatencyBuckets()).observe(seconds * 1000)

    def write_latency_of(self, topic: str) -> LatencyValues | None:
        """The topic's publish latency buckets (event loop), as immutable values."""
        buckets = self.write_latency.get(topic)
        return None if buckets is None else buckets.values()

    def ledger_write_latency_of(self, topic: str) -> LatencyValues | None:
        """The topic's fsync latency buckets, read one topic at a time: copying every
        topic's at once held the event loop for 100 to 200 ms at 50,000 topics."""
        with self._lock:
            buckets = self._ledger_write_latency.get(topic)
            return None if buckets is None else buckets.values()

    def forget_topic(self, topic: str) -> None:
        self._appended.pop(topic, None)
        self.write_latency.pop(topic, None)
        with self._lock:
            self._ledger_write_latency.pop(topic, None)
