"""Latency and expiry figures the broker records for stats and ``/metrics``.

Publish latency is measured as Pulsar measures ``recordAddLatency``: from the append of
an entry to the moment storage reports it durable (the send receipt goes out then).
The group committer reports how long each ledger's fsync took from its worker thread,
so everything fed from there is guarded by a lock. Everything else runs on the event
loop thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from magnetar.core.positions import Position
from magnetar.core.stats import LatencyBuckets, LatencyQuantiles, LatencyValues


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
