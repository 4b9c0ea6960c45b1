"""A consumer's pending entries: a cumulative ack removes exactly those at or before it,
whether deliveries came in position order (the fast path) or not (redeliveries)."""

from __future__ import annotations

from core_sinks import RecordingSink
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer

POSITIONS = st.builds(Position, st.integers(1, 3), st.integers(0, 20))
STEPS = st.lists(st.one_of(st.tuples(st.just("deliver"), POSITIONS), st.tuples(st.just("ack"), POSITIONS),
                           st.tuples(st.just("take"), st.just(Position(0, 0)))), max_size=60)


@given(STEPS)
def test_cumulative_ack_removes_exactly_the_entries_up_to_it(steps: list[tuple[str, Position]]) -> None:
    consumer = Consumer(1, "c", RecordingSink())
    model: dict[Position, None] = {}
    for verb, pos in steps:
        if verb == "deliver":
            if pos in model:
                continue  # the broker never hands out an entry that is still pending
            consumer.deliver(pos, -1, b"x", 1, 0, None, 0)
            model[pos] = None
        elif verb == "ack":
            removed = consumer.remove_pending_up_to(pos)
            expected = [p for p in model if p <= pos]
            assert sorted(removed) == sorted(expected)
            for p in expected:
                del model[p]
        else:
            consumer.take_all_pending()
            model.clear()
        assert list(consumer.pending) == list(model)
        assert consumer.unacked_messages == len(model)
