"""Dispatch rate limits: Pulsar's ``dispatchRate`` (per topic) and ``subscriptionDispatchRate``.

A subscription sends entries until one of its buckets (the topic's, shared by all its
subscriptions, and its own) runs short; then its consumers take nothing until the bucket
has refilled, when the broker's timer wakes the throttle and dispatch resumes. An entry
is never split: a batch larger than what is left goes out whole and the wait is longer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from magnetar.core.policies.rate_limit import RateLimiter
from magnetar.core.subscriptions.consumer import Consumer


class Throttled(Protocol):
    """The dispatcher side of a throttle."""

    consumers: list[Consumer]

    def begin_round(self) -> None: ...

    def dispatch(self, now_ms: int) -> None: ...


class DispatchThrottle:
    def __init__(self, dispatcher: Throttled, shared: RateLimiter, own: RateLimiter,
                 wake_up: Callable[[DispatchThrottle, int], None]) -> None:
        self.dispatcher = dispatcher
        #: the topic's bucket, shared with its other subscriptions, and the subscription's own
        self.shared, self.own = shared, own
        self.limiters = [limiter for limiter in (shared, own) if limiter.active]
        self.wake_up = wake_up
        self.paused = False

    @property
    def active(self) -> bool:
        return bool(self.limiters)

    def on_sent(self, messages: int, size: int, now_ms: int) -> None:
        wait = 0
        for limiter in self.limiters:
            wait = max(wait, limiter.take(messages, size, now_ms))
        if wait and not self.paused:
            self.paused = True
            for consumer in self.dispatcher.consumers:
                consumer.rate_paused = True
            self.wake_up(self, now_ms + wait)

    def on_timer(self, now_ms: int) -> None:
        self.paused = False
        for consumer in self.dispatcher.consumers:
            consumer.rate_paused = False
        self.dispatcher.begin_round()
        self.dispatcher.dispatch(now_ms)

    def release(self) -> None:
        """The limits changed or were removed: consumers are free at once."""
        if self.paused:
            self.paused = False
            for consumer in self.dispatcher.consumers:
                consumer.rate_paused = False
