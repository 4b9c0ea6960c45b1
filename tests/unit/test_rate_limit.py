"""Publish rate limits: the pause a send earns, and the rate held over time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.policies.rate_limit import RateLimiter, TokenBucket


def test_a_burst_within_one_second_of_tokens_is_not_paused() -> None:
    limiter = RateLimiter(msgs_per_s=100, bytes_per_s=0)
    assert all(limiter.take(1, 10, now_ms=0) == 0 for _ in range(100))
    assert limiter.take(1, 10, now_ms=0) == 10, "one message short at 100/s: 10 ms"
    assert limiter.limited_times == 1


def test_the_tighter_dimension_sets_the_pause() -> None:
    limiter = RateLimiter(msgs_per_s=1000, bytes_per_s=1000)
    assert limiter.take(1, 3000, now_ms=0) == 2000, "2000 bytes short at 1000 B/s"


def test_no_limits_is_inactive() -> None:
    assert not RateLimiter(0, -1).active


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 200)), min_size=1, max_size=200))
def test_a_sender_that_honours_every_pause_keeps_the_rate(sends: list[tuple[int, int]]) -> None:
    """Once a send's pause is over, messages sent never exceed the bucket's second plus
    rate x time."""
    rate = 100
    bucket = TokenBucket(rate)
    now = sent = 0
    for messages, think_ms in sends:
        now += think_ms
        sent += messages
        now += bucket.take(messages, now)
        assert sent <= rate + rate * now / 1000 + 1e-6
