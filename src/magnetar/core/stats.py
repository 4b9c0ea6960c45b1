"""Counters and rates over a rolling window, as Pulsar's stats report them.

Rates are messages (and bytes) per second over the last window; time is passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_MS = 10_000


@dataclass
class RateCounter:
    total_msgs: int = 0
    total_bytes: int = 0
    #: how many times ``add`` was called (entries, for counters fed once per entry)
    total_events: int = 0
    #: time of the last ``add``, 0 if never
    last_ms: int = 0
    _samples: deque[tuple[int, int, int]] = field(default_factory=deque, repr=False)

    def add(self, now_ms: int, msgs: int, size_bytes: int = 0) -> None:
        self.total_msgs += msgs
        self.total_bytes += size_bytes
        self.total_events += 1
        self.last_ms = now_ms
        bucket = now_ms // 1000
        if self._samples and self._samples[-1][0] == bucket:
            _, m, b = self._samples[-1]
            self._samples[-1] = (bucket, m + msgs, b + size_bytes)
        else:
            self._samples.append((bucket, msgs, size_bytes))
            self._trim(now_ms)

    def rate(self, now_ms: int) -> tuple[float, float]:
        """(messages/s, bytes/s) over the window ending now."""
        self._trim(now_ms)
        msgs = sum(m for _, m, _ in self._samples)
        size = sum(b for _, _, b in self._samples)
        seconds = WINDOW_MS / 1000
        return msgs / seconds, size / seconds

    def _trim(self, now_ms: int) -> None:
        oldest = (now_ms - WINDOW_MS) // 1000
        while self._samples and self._samples[0][0] <= oldest:
            self._samples.popleft()
