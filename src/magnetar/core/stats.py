"""Counters and rates over a rolling window, as Pulsar's stats report them.

Rates are messages (and bytes) per second over the last window; time is passed in.
"""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass, field

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
