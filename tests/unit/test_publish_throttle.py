"""Inbound back-pressure accounting: when a connection stops being read, and when again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.policies.publish_throttle import PendingPublishes, PublishBuffer


def test_reading_stops_at_the_limit_and_restarts_at_half() -> None:
    pending = PendingPublishes(max_pending=4, buffer=PublishBuffer(0))
    for _ in range(3):
        pending.sent(1, 10)
    assert not pending.should_pause()
    pending.sent(1, 10)
    assert pending.should_pause()
    pending.answered(1)
    assert not pending.may_resume(), "three pending is above half of four"
    pending.answered(1)
    assert pending.may_resume()


def test_a_zero_limit_never_pauses() -> None:
    pending = PendingPublishes(max_pending=0, buffer=PublishBuffer(0))
    for seq in range(10_000):
        pending.sent(seq % 3, 100)
    assert not pending.should_pause() and pending.may_resume()


def test_the_broker_buffer_pauses_every_connection_until_half_is_answered() -> None:
    buffer = PublishBuffer(limit_bytes=1000)
    a, b = PendingPublishes(0, buffer), PendingPublishes(0, buffer)
    a.sent(1, 600)
    assert not b.should_pause()
    b.sent(1, 600)
    assert a.should_pause() and b.should_pause()
    assert not a.answered(1), "600 bytes left is above half the limit"
    assert b.answered(1), "nothing left: the buffer is lifted"
    assert a.may_resume() and b.may_resume()


def test_a_closed_producer_takes_its_unanswered_sends_with_it() -> None:
    buffer = PublishBuffer(limit_bytes=100)
    pending = PendingPublishes(max_pending=2, buffer=buffer)
    pending.sent(1, 80)
    pending.sent(1, 80)
    assert pending.should_pause()
    assert pending.dropped(1)
    assert pending.count == 0 and buffer.pending_bytes == 0 and pending.may_resume()
    assert not pending.answered(1), "a receipt for a producer already gone counts for nothing"
    assert pending.count == 0


@given(st.lists(st.tuples(st.sampled_from(["send", "answer", "drop"]), st.integers(0, 3), st.integers(1, 500))))
def test_counts_never_drift(ops: list[tuple[str, int, int]]) -> None:
    buffer = PublishBuffer(limit_bytes=2000)
    pending = PendingPublishes(max_pending=5, buffer=buffer)
    model: dict[int, list[int]] = {}
    for op, producer, size in ops:
        if op == "send":
            pending.sent(producer, size)
            model.setdefault(producer, []).append(size)
        elif op == "answer":  # receipts go out several at a time after a sync
            count = size % 3 + 1
            pending.answered(producer, count)
            del model.get(producer, [])[:count]
        else:
            pending.dropped(producer)
            model.pop(producer, None)
        assert pending.count == sum(len(v) for v in model.values())
        assert buffer.pending_bytes == sum(sum(v) for v in model.values())
    pending.release_all()
    assert pending.count == 0 and buffer.pending_bytes == 0 and not buffer.full
