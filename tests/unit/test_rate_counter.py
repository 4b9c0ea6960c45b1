"""RateCounter: Pulsar's rolling-window rates, and no container kept for a counter at rest."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.stats import WINDOW_MS, RateCounter

pytestmark = pytest.mark.timeout(30)


def test_rate_is_what_the_window_saw_per_second() -> None:
    counter = RateCounter()
    counter.add(1_000, 10, 1_000)
    counter.add(1_500, 10, 1_000)
    counter.add(5_000, 30, 3_000)
    assert counter.rate(5_000) == (5.0, 500.0)
    assert (counter.total_msgs, counter.total_bytes, counter.total_events, counter.last_ms) == (50, 5_000, 3, 5_000)


def test_seconds_leave_the_window_after_ten_seconds() -> None:
    counter = RateCounter()
    counter.add(1_000, 10)
    counter.add(2_000, 20)
    assert counter.rate(1_000 + WINDOW_MS - 1) == (3.0, 0.0)
    assert counter.rate(1_000 + WINDOW_MS) == (2.0, 0.0)  # second 1 has left
    assert counter.rate(2_000 + WINDOW_MS) == (0.0, 0.0)


def containers(counter: RateCounter) -> list[object]:
    return [ref for ref in gc.get_referents(counter) if gc.is_tracked(ref) and not isinstance(ref, type)]


def test_a_counter_at_rest_holds_no_container_for_the_collector_to_walk() -> None:
    counter = RateCounter()
    assert containers(counter) == []
    counter.add(1_000, 1)
    assert len(containers(counter)) == 1
    counter.rate(1_000 + WINDOW_MS)  # the window emptied
    assert containers(counter) == []
    counter.add(20_000, 2)  # and counts again after
    assert counter.rate(20_000) == (0.2, 0.0)


@given(st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 1_000)), max_size=50))
def test_rate_matches_a_plain_sum_over_the_window(adds: list[tuple[int, int]]) -> None:
    counter = RateCounter()
    adds.sort()
    for at, msgs in adds:
        counter.add(at, msgs)
    now = adds[-1][0] if adds else 0
    oldest = (now - WINDOW_MS) // 1000
    expected = sum(msgs for at, msgs in adds if at // 1000 > oldest)
    assert counter.rate(now) == (expected / (WINDOW_MS / 1000), 0.0)
