"""Rate limits: Pulsar's ``publishRate`` and ``dispatchRate`` policies and their broker settings.

A token bucket per dimension (messages, bytes), filled at the configured rate and holding
one second's worth. A send takes its tokens even when that leaves the bucket short; the
shortfall is how long the publishing connection must not be read, which is how Pulsar
throttles producers (it turns off auto-read on their connections). So a producer keeps its
rate over time whatever the size of its batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(eq=False)
class TokenBucket:
    rate_per_s: float
    updated_ms: int = 0
    tokens: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.rate_per_s

    def take(self, amount: float, now_ms: int) -> int:
        """Take ``amount``; the milliseconds until the bucket is no longer short (0: not short)."""
        elapsed = max(0, now_ms - self.updated_ms)
        self.updated_ms = now_ms
        self.tokens = min(self.rate_per_s, self.tokens + elapsed * self.rate_per_s / 1000)
        self.tokens -= amount
        if self.tokens >= 0:
            return 0
        return max(1, math.ceil(-self.tokens * 1000 / self.rate_per_s))


@dataclass(eq=False)
class RateLimiter:
    """Messages and bytes per second; a limit of 0 or less is no limit."""

    msgs_per_s: float
    bytes_per_s: float
    #: times a send found the limit exceeded (``publishRateLimitedTimes``)
    limited_times: int = 0
    _buckets: list[tuple[TokenBucket, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._buckets = [(TokenBucket(self.msgs_per_s), True)] if self.msgs_per_s > 0 else []
        if self.bytes_per_s > 0:
            self._buckets.append((TokenBucket(self.bytes_per_s), False))

    @property
    def active(self) -> bool:
        return bool(self._buckets)

    def take(self, messages: int, size: int, now_ms: int) -> int:
        """Count a send; how long its sender must pause, in ms (0: no pause)."""
        pause = 0
        for bucket, counts_messages in self._buckets:
            pause = max(pause, bucket.take(messages if counts_messages else size, now_ms))
        if pause:
            self.limited_times += 1
        return pause

    def same_limits(self, msgs_per_s: float, bytes_per_s: float) -> bool:
        return (self.msgs_per_s, self.bytes_per_s) == (msgs_per_s, bytes_per_s)
