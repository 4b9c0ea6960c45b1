"""Deduplication by a message property within a time window (magnetar.core.dedup)."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.dedup import (
    BYTES_PER_ID_MAX,
    BYTES_PER_PENDING_ID_MAX,
    DEFAULT_PROPERTY_NAME,
    PropertyDedupWindow,
)

WINDOW_MS = 10_000


def test_duplicate_inside_the_window_is_dropped() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 100)
    assert window.check_and_record("order-1", 1_000) is False
    window.on_persisted("order-1")
    assert window.check_and_record("order-1", 1_000 + WINDOW_MS - 1) is True
    assert window.check_and_record("order-2", 2_000) is False
    assert window.stats().duplicates_dropped == 1


def test_duplicate_outside_the_window_is_kept() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 100)
    window.check_and_record("order-1", 1_000)
    assert window.check_and_record("order-1", 1_000 + WINDOW_MS) is False
    assert window.stats().duplicates_dropped == 0


def test_the_window_runs_from_the_first_sighting() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 100)
    window.check_and_record("x", 0)
    assert window.check_and_record("x", WINDOW_MS - 1) is True  # does not extend the window
    assert window.check_and_record("x", WINDOW_MS) is False


def test_ids_older_than_the_window_are_evicted() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 100)
    for i in range(5):
        window.check_and_record(f"id-{i}", i * 1_000)
    window.expire(3_000 + WINDOW_MS)
    stats = window.stats()
    assert (stats.ids, stats.oldest_ms) == (1, 4_000)


def test_bound_evicts_the_oldest_at_exactly_max_ids() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 3)
    for i in range(3):
        window.check_and_record(f"id-{i}", i)
    assert len(window) == 3 and window.stats().evicted_over_bound == 0
    window.check_and_record("id-3", 3)
    stats = window.stats()
    assert (stats.ids, stats.max_ids, stats.oldest_ms, stats.evicted_over_bound) == (3, 3, 1, 1)
    assert window.check_and_record("id-0", 4) is False  # forgotten early
    assert window.check_and_record("id-3", 5) is True


def test_failed_write_forgets_the_id_so_the_retry_is_stored() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 10)
    assert window.check_and_record("x", 0) is False
    assert window.is_pending("x")
    assert window.check_and_record("x", 1) is True  # the shell can see it is still pending
    window.on_write_failed("x")
    assert window.check_and_record("x", 2) is False
    window.on_persisted("x")
    assert not window.is_pending("x")
    window.on_write_failed("x")  # too late to forget a durable id
    assert window.check_and_record("x", 3) is True


def test_stats_describe_the_window() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 7, property_name="order_id")
    stats = window.stats()
    assert stats.property_name == "order_id"
    assert (stats.window_ms, stats.ids, stats.max_ids, stats.oldest_ms) == (WINDOW_MS, 0, 7, None)
    assert PropertyDedupWindow(1, 1).property_name == DEFAULT_PROPERTY_NAME == "__dedup_id"


def test_ids_may_be_bytes_and_of_any_length() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 10)
    long_id = "x" * 100_000
    assert window.check_and_record(long_id, 0) is False
    assert window.check_and_record(long_id, 1) is True
    assert window.check_and_record("é".encode(), 2) is False
    assert window.check_and_record("é", 3) is True


def test_a_clock_running_backwards_does_not_shorten_the_window() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 10)
    window.check_and_record("a", 50_000)
    window.check_and_record("b", 1_000)
    assert window.check_and_record("a", 2_000) is True
    assert window.stats().oldest_ms == 50_000


@pytest.mark.parametrize(
    ("window_ms", "max_ids", "name", "message"),
    [(0, 1, "p", "window"), (1, 0, "p", "ids"), (1, 1, "", "property name")],
)
def test_invalid_settings_are_refused(window_ms: int, max_ids: int, name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PropertyDedupWindow(window_ms, max_ids, name)


# -- persistence -------------------------------------------------------------------------


def test_snapshot_and_restore_survive_a_restart() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 100)
    for i in range(5):
        window.check_and_record(f"id-{i}", 1_000 + i)
        window.on_persisted(f"id-{i}")
    window.check_and_record("in-flight", 2_000)
    data = window.snapshot()
    assert isinstance(data, bytes)

    restarted = PropertyDedupWindow(WINDOW_MS, 100)
    restarted.restore(data)
    assert restarted.stats().ids == 5
    assert restarted.check_and_record("id-3", 3_000) is True
    # The write in flight at snapshot time is not remembered: replay decides.
    assert restarted.check_and_record("in-flight", 3_000) is False
    assert restarted.check_and_record("id-0", 1_000 + WINDOW_MS) is False  # expired


def test_replay_after_restore_adds_the_later_entries() -> None:
    restarted = PropertyDedupWindow(WINDOW_MS, 100)
    restarted.restore(PropertyDedupWindow(WINDOW_MS, 100).snapshot())
    restarted.record_persisted("late", 5_000)
    restarted.record_persisted("late", 5_001)
    assert len(restarted) == 1
    assert restarted.check_and_record("late", 6_000) is True
    assert not restarted.is_pending("late")


def test_restore_into_a_smaller_bound_keeps_the_newest() -> None:
    window = PropertyDedupWindow(WINDOW_MS, 10)
    for i in range(10):
        window.check_and_record(f"id-{i}", i)
        window.on_persisted(f"id-{i}")
    smaller = PropertyDedupWindow(WINDOW_MS, 4)
    smaller.restore(window.snapshot())
    assert smaller.stats().oldest_ms == 6
    assert smaller.check_and_record("id-9", 10) is True
    assert smaller.check_and_record("id-5", 10) is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"MG", "truncated"),
        (b"XXXX\x01\x00\x00\x00\x00", "not a deduplication window snapshot"),
        (b"MGDW\x01\x00\x00\x00\x01", "expected 33"),
    ],
)
def test_corrupt_snapshot_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PropertyDedupWindow(WINDOW_MS, 10).restore(data)


# -- the memory bound ---------------------------------------------------------------------


def used_bytes(max_ids: int, persist: bool) -> tuple[int, int]:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        window = PropertyDedupWindow(3_600_000, max_ids)
        for i in range(3 * max_ids):  # well past the bound
            dedup_id = f"order-{i:09d}-with-a-long-business-key"
            window.check_and_record(dedup_id, 1_700_000_000_000 + i)
            if persist:
                window.on_persisted(dedup_id)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return used, len(window)


# 10,924 ids is the worst case measured: the dict has just grown.
@pytest.mark.parametrize("max_ids", [10_924, 20_000])
def test_memory_stays_under_the_stated_bound_at_max_ids(max_ids: int) -> None:
    used, ids = used_bytes(max_ids, persist=True)
    assert ids == max_ids
    assert used <= BYTES_PER_ID_MAX * max_ids


def test_memory_bound_with_every_write_in_flight() -> None:
    used, ids = used_bytes(10_924, persist=False)
    assert ids == 10_924
    assert used <= (BYTES_PER_ID_MAX + BYTES_PER_PENDING_ID_MAX) * ids


# -- properties ---------------------------------------------------------------------------

events = st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 3_000)),  # (id, time step)
    max_size=200,
)


@settings(max_examples=300)
@given(events=events, window_ms=st.integers(1, 5_000), max_ids=st.integers(1, 12))
def test_matches_a_reference_model(events: list[tuple[int, int]], window_ms: int, max_ids: int) -> None:
    """Inside the window and the bound: dropped; outside: kept; never more than max_ids."""
    window = PropertyDedupWindow(window_ms, max_ids)
    remembered: dict[int, int] = {}  # id -> first seen, oldest first
    now_ms = 0
    for dedup_id, step_ms in events:
        now_ms += step_ms
        remembered = {i: t for i, t in remembered.items() if now_ms - t < window_ms}
        expected = dedup_id in remembered
        if not expected:
            if len(remembered) >= max_ids:
                del remembered[next(iter(remembered))]
            remembered[dedup_id] = now_ms
        assert window.check_and_record(str(dedup_id), now_ms) is expected
        window.on_persisted(str(dedup_id))
        assert len(window) == len(remembered) <= max_ids
        assert window.stats().oldest_ms == next(iter(remembered.values()))


@settings(max_examples=100)
@given(events=events, cut=st.integers(0, 200))
def test_restore_then_replay_equals_no_restart(events: list[tuple[int, int]], cut: int) -> None:
    original = PropertyDedupWindow(4_000, 8)
    now_ms = 0
    stamped: list[tuple[str, int]] = []
    for number, step_ms in events:
        now_ms += step_ms
        stamped.append((str(number), now_ms))
    for dedup_id, at_ms in stamped[:cut]:
        if not original.check_and_record(dedup_id, at_ms):
            original.on_persisted(dedup_id)
    restarted = PropertyDedupWindow(4_000, 8)
    restarted.restore(original.snapshot())
    for dedup_id, at_ms in stamped[cut:]:
        dropped = original.check_and_record(dedup_id, at_ms)
        assert restarted.check_and_record(dedup_id, at_ms) is dropped
        original.on_persisted(dedup_id)
        restarted.on_persisted(dedup_id)
