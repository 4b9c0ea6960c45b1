"""InMemoryDelayedDeliveryTracker: Pulsar's AbstractDeliveryTrackerTest cases plus slot rounding."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker, timestamp_precision_bits
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.positions import Position


def make(tick_time_ms: int = 1, strict: bool = False, lookahead: int = 50_000) -> InMemoryDelayedDeliveryTracker:
    return InMemoryDelayedDeliveryTracker(
        tick_time_ms=tick_time_ms,
        is_delayed_delivery_deliver_at_time_strict=strict,
        fixed_delay_detection_lookahead=lookahead,
    )


def test_satisfies_the_tracker_interface() -> None:
    tracker: DelayedDeliveryTracker = make()
    assert isinstance(tracker, DelayedDeliveryTracker)


def test_basic_flow() -> None:
    tracker = make(tick_time_ms=1)
    assert not tracker.has_message_available(0)
    for ledger, entry, at in [(1, 2, 20), (2, 1, 10), (3, 3, 30), (4, 5, 50), (5, 4, 40)]:
        assert tracker.add_message(ledger, entry, at, now_ms=0)
    assert not tracker.has_message_available(0)
    assert tracker.number_of_delayed_messages == 5
    assert tracker.get_scheduled_messages(10, now_ms=0) == []

    # Already due: the dispatcher delivers it directly.
    assert not tracker.add_message(6, 6, 10, now_ms=15)
    assert tracker.number_of_delayed_messages == 5
    assert tracker.has_message_available(15)
    assert tracker.get_scheduled_messages(10, now_ms=15) == [Position(2, 1)]

    assert tracker.get_scheduled_messages(1, now_ms=60) == [Position(1, 2)]
    assert tracker.number_of_delayed_messages == 3
    assert tracker.get_scheduled_messages(3, now_ms=60) == [Position(3, 3), Position(4, 5), Position(5, 4)]
    assert tracker.number_of_delayed_messages == 0
    assert not tracker.has_message_available(60)
    assert tracker.next_delivery_time_ms() is None


def test_add_within_tick_time_is_not_held() -> None:
    tracker = make(tick_time_ms=100)
    assert not tracker.add_message(1, 1, 10, now_ms=0)
    assert not tracker.add_message(2, 2, 99, now_ms=0)
    assert not tracker.add_message(3, 3, 100, now_ms=0)
    assert tracker.add_message(4, 4, 101, now_ms=0)
    assert tracker.add_message(5, 5, 200, now_ms=0)
    assert tracker.number_of_delayed_messages == 2


def test_strict_holds_everything_in_the_future() -> None:
    tracker = make(tick_time_ms=100, strict=True)
    assert not tracker.add_message(1, 1, 9, now_ms=10)
    assert not tracker.add_message(4, 4, 10, now_ms=10)
    assert tracker.add_message(1, 1, 11, now_ms=10)
    assert tracker.number_of_delayed_messages == 1
    assert not tracker.has_message_available(10)


def test_negative_deliver_at_is_not_delayed() -> None:
    assert not make().add_message(1, 1, -5, now_ms=0)


def test_precision_bits_follow_the_tick() -> None:
    assert [timestamp_precision_bits(t) for t in (0, 1, 2, 3, 1000, 1024)] == [0, 0, 1, 1, 9, 10]


def test_not_strict_is_at_most_one_tick_early() -> None:
    tracker = make(tick_time_ms=1000)
    assert tracker.add_message(1, 1, 10_000, now_ms=0)
    slot = 10_000 & ~511
    assert tracker.next_delivery_time_ms() == slot
    first_available = slot - 1000 + 512 - 1
    assert first_available >= 10_000 - 1000
    assert not tracker.has_message_available(first_available - 1)
    assert tracker.get_scheduled_messages(10, first_available - 1) == []
    assert tracker.has_message_available(first_available)
    assert tracker.get_scheduled_messages(10, first_available) == [Position(1, 1)]


def test_strict_is_never_early_and_less_than_a_tick_late() -> None:
    tracker = make(tick_time_ms=1000, strict=True)
    assert tracker.add_message(1, 1, 10_000, now_ms=0)
    slot = next_multiple = (10_000 + 511) // 512 * 512
    assert tracker.next_delivery_time_ms() == next_multiple
    assert 10_000 <= slot < 10_000 + 1000
    assert not tracker.has_message_available(slot - 1)
    assert tracker.get_scheduled_messages(10, slot - 1) == []
    assert tracker.get_scheduled_messages(10, slot) == [Position(1, 1)]


def test_slots_come_out_in_time_order_and_by_position_within_a_slot() -> None:
    tracker = make(tick_time_ms=1000)
    tracker.add_message(9, 9, 5_000, now_ms=0)  # slot 4608
    tracker.add_message(2, 7, 5_100, now_ms=0)  # same slot
    tracker.add_message(1, 1, 20_000, now_ms=0)
    tracker.add_message(3, 3, 9_000, now_ms=0)
    out = []
    for now in range(0, 21_000, 100):
        out.extend(tracker.get_scheduled_messages(100, now))
    assert out == [Position(2, 7), Position(9, 9), Position(3, 3), Position(1, 1)]


def test_max_messages_splits_a_slot() -> None:
    tracker = make(tick_time_ms=1)
    for entry in range(10):
        tracker.add_message(1, entry, 100, now_ms=0)
    assert tracker.get_scheduled_messages(4, 100) == [Position(1, e) for e in range(4)]
    assert tracker.number_of_delayed_messages == 6
    assert tracker.get_scheduled_messages(100, 100) == [Position(1, e) for e in range(4, 10)]


def test_contains_and_duplicate_add() -> None:
    tracker = make(tick_time_ms=1)
    assert tracker.add_message(3, 4, 100, now_ms=0)
    assert tracker.add_message(3, 4, 100, now_ms=0)
    assert tracker.contains_message(3, 4)
    assert not tracker.contains_message(3, 5)
    assert tracker.number_of_delayed_messages == 1
    assert tracker.get_scheduled_messages(10, 100) == [Position(3, 4)]
    assert not tracker.contains_message(3, 4)


def test_readding_a_due_tracked_message_hands_it_to_the_dispatcher_once() -> None:
    tracker = make(tick_time_ms=1)
    assert tracker.add_message(1, 1, 100, now_ms=0)
    assert tracker.add_message(1, 2, 100, now_ms=0)
    # The cursor rewound and re-read 1:1 after its time: it is delivered directly...
    assert not tracker.add_message(1, 1, 100, now_ms=150)
    assert tracker.number_of_delayed_messages == 1
    # ...and not a second time from the tracker.
    assert tracker.get_scheduled_messages(10, 150) == [Position(1, 2)]


def test_mark_delete_drops_acknowledged_positions() -> None:
    tracker = make(tick_time_ms=1)
    for entry in range(5):
        tracker.add_message(1, entry, 100, now_ms=0)
    tracker.add_message(2, 0, 100, now_ms=0)
    tracker.on_mark_delete(Position(1, 2))
    assert tracker.number_of_delayed_messages == 3
    assert tracker.get_scheduled_messages(10, 100) == [Position(1, 3), Position(1, 4), Position(2, 0)]


def test_fixed_delay_detection_pauses_reading() -> None:
    tracker = make(tick_time_ms=10, lookahead=5)
    for i in range(5):
        tracker.add_message(1, i, 1_000 + i * 100, now_ms=0)
    assert tracker.should_pause_all_deliveries(0)
    # Due messages: deliver them rather than pause.
    assert not tracker.should_pause_all_deliveries(1_000)
    # An earlier delivery time than the highest (beyond one tick) breaks the pattern.
    tracker.add_message(1, 9, 500, now_ms=0)
    assert not tracker.should_pause_all_deliveries(0)
    tracker.get_scheduled_messages(100, 10_000)
    for i in range(5):
        tracker.add_message(2, i, 20_000 + i * 100, now_ms=10_000)
    assert tracker.should_pause_all_deliveries(10_000)


def test_fixed_delay_detection_disabled_with_zero_lookahead() -> None:
    tracker = make(tick_time_ms=10, lookahead=0)
    for i in range(5):
        tracker.add_message(1, i, 1_000 + i * 100, now_ms=0)
    assert not tracker.should_pause_all_deliveries(0)


def test_clear_and_entry_id_limit() -> None:
    tracker = make()
    tracker.add_message(1, (1 << 32) - 1, 100, now_ms=0)
    assert tracker.number_of_delayed_messages == 1
    assert tracker.buffer_memory_bytes > 0
    with pytest.raises(ValueError, match="32-bit"):
        tracker.add_message(1, 1 << 32, 100, now_ms=0)
    tracker.clear()
    assert tracker.number_of_delayed_messages == 0
    assert tracker.next_delivery_time_ms() is None


def test_bytes_per_message() -> None:
    """Memory per delayed message: 60k messages, delays spread over ten minutes, 1 s tick."""
    count = 60_000
    rng = random.Random(7)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        tracker = make(tick_time_ms=1000)
        for i in range(count):
            tracker.add_message(1 + i // 20_000, i % 20_000, 10_000 + rng.randrange(600_000), now_ms=0)
        traced = tracemalloc.take_snapshot().compare_to(before, "filename")
        traced_bytes = sum(stat.size_diff for stat in traced)
    finally:
        tracemalloc.stop()
    # Roaring containers are allocated outside Python's allocator; add their own size.
    native = tracker.buffer_memory_bytes
    per_message = (traced_bytes + native) / count
    print(f"\nin-memory tracker: {traced_bytes / count:.1f} B/msg traced + {native / count:.1f} B/msg bitmaps")
    assert tracker.number_of_delayed_messages == count
    assert per_message < 60
