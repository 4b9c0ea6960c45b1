"""PendingAcksMap: position order, hooks, cumulative removal, closing."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.key_shared.pending_acks_map import PendingAck, PendingAcksMap


@dataclass
class RecordingRemoveHandler:
    events: list[tuple[object, ...]] = field(default_factory=list)

    def handle_removing(self, consumer: str, ledger_id: int, entry_id: int, sticky_key_hash: int,
                        closing: bool) -> None:
        self.events.append(("remove", consumer, ledger_id, entry_id, sticky_key_hash, closing))

    def start_batch(self) -> None:
        self.events.append(("start",))

    def end_batch(self) -> None:
        self.events.append(("end",))


def positions(acks: PendingAcksMap[str]) -> list[tuple[int, int]]:
    return [(a.ledger_id, a.entry_id) for a in acks]


def test_iteration_is_in_position_order_even_after_out_of_order_adds() -> None:
    acks = PendingAcksMap("c1")
    for ledger, entry in [(2, 5), (1, 9), (2, 1), (1, 3), (3, 0), (2, 3)]:
        assert acks.add(ledger, entry, 1, 100 + entry)
    assert positions(acks) == [(1, 3), (1, 9), (2, 1), (2, 3), (2, 5), (3, 0)]
    assert len(acks) == acks.size == 6
    assert acks.get(2, 3) == PendingAck(2, 3, 1, 103)
    assert acks.get(2, 4) is None and acks.get(9, 9) is None
    assert (1, 9) in acks and acks.contains(3, 0) and (3, 1) not in acks


def test_re_adding_a_position_replaces_it_without_double_counting() -> None:
    acks = PendingAcksMap("c1")
    acks.add(1, 1, 1, 5)
    acks.add(1, 1, 4, 6)
    assert len(acks) == 1 and acks.get(1, 1) == PendingAck(1, 1, 4, 6)


def test_add_handler_can_refuse() -> None:
    seen: list[tuple[str, int, int, int]] = []

    def only_even_hashes(consumer: str, ledger_id: int, entry_id: int, sticky_key_hash: int) -> bool:
        seen.append((consumer, ledger_id, entry_id, sticky_key_hash))
        return sticky_key_hash % 2 == 0

    acks = PendingAcksMap("c1", add_handler=only_even_hashes)
    assert acks.add(1, 1, 1, 10)
    assert not acks.add(1, 2, 1, 11)
    assert positions(acks) == [(1, 1)]
    assert seen == [("c1", 1, 1, 10), ("c1", 1, 2, 11)]


def test_invalid_values_are_rejected() -> None:
    acks = PendingAcksMap("c1")
    with pytest.raises(ValueError):
        acks.add(1, 1, 1, 65536)
    with pytest.raises(ValueError):
        acks.add(1, 1, -1, 5)


def test_remove_calls_the_remove_handler() -> None:
    handler = RecordingRemoveHandler()
    acks = PendingAcksMap("c1", remove_handler=handler)
    acks.add(1, 1, 3, 42)
    assert acks.remove(1, 1)
    assert not acks.remove(1, 1)
    assert acks.remove_and_get(7, 7) is None
    assert handler.events == [("remove", "c1", 1, 1, 42, False)]
    assert len(acks) == 0


def test_remove_all_up_to_is_cumulative_batched_and_ordered() -> None:
    handler = RecordingRemoveHandler()
    acks = PendingAcksMap("c1", remove_handler=handler)
    for ledger, entry in [(2, 2), (1, 5), (2, 0), (3, 1), (1, 7)]:
        acks.add(ledger, entry, 1, entry + 1)
    removed: list[PendingAck] = []
    assert acks.remove_all_up_to(2, 1, removed.append) == 3
    assert [(a.ledger_id, a.entry_id) for a in removed] == [(1, 5), (1, 7), (2, 0)]
    assert positions(acks) == [(2, 2), (3, 1)]
    assert handler.events[0] == ("start",) and handler.events[-1] == ("end",)
    assert [e[2:4] for e in handler.events[1:-1]] == [(1, 5), (1, 7), (2, 0)]
    handler.events.clear()
    assert acks.remove_all_up_to(0, 0) == 0
    assert handler.events == []  # nothing removed, no batch


def test_for_each_leaves_the_map_alone() -> None:
    acks = PendingAcksMap("c1")
    acks.add(1, 2, 1, 5)
    acks.add(1, 1, 1, 6)
    seen: list[PendingAck] = []
    acks.for_each(seen.append)
    assert [a.entry_id for a in seen] == [1, 2] and len(acks) == 2


def test_for_each_and_close_hands_over_everything_then_refuses_adds() -> None:
    handler = RecordingRemoveHandler()
    acks = PendingAcksMap("c1", remove_handler=handler)
    acks.add(1, 2, 1, 5)
    acks.add(1, 1, 2, 6)
    replayed: list[PendingAck] = []

    def replay(ack: PendingAck) -> None:
        handler.events.append(("replay", ack.entry_id))
        replayed.append(ack)

    acks.for_each_and_close(replay)
    assert [a.entry_id for a in replayed] == [1, 2]
    # each entry reaches the replay queue before its removal is reported
    assert handler.events == [
        ("start",),
        ("replay", 1), ("remove", "c1", 1, 1, 6, True),
        ("replay", 2), ("remove", "c1", 1, 2, 5, True),
        ("end",),
    ]
    assert len(acks) == 0 and acks.closed
    assert not acks.add(1, 3, 1, 7)


def test_for_each_and_clear_keeps_the_map_open() -> None:
    handler = RecordingRemoveHandler()
    acks = PendingAcksMap("c1", remove_handler=handler)
    acks.add(1, 1, 1, 5)
    acks.for_each_and_clear(lambda ack: None)
    assert ("remove", "c1", 1, 1, 5, False) in handler.events
    assert not acks.closed and acks.add(1, 2, 1, 5)


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "cumulative"]), st.integers(0, 3), st.integers(0, 20)),
        max_size=60,
    )
)
def test_behaves_like_a_sorted_dict(ops: list[tuple[str, int, int]]) -> None:
    acks = PendingAcksMap("c")
    model: dict[tuple[int, int], int] = {}
    for op, ledger, entry in ops:
        if op == "add":
            acks.add(ledger, entry, 1, entry)
            model[(ledger, entry)] = entry
        elif op == "remove":
            assert acks.remove(ledger, entry) == ((ledger, entry) in model)
            model.pop((ledger, entry), None)
        else:
            doomed = [p for p in model if p <= (ledger, entry)]
            assert acks.remove_all_up_to(ledger, entry) == len(doomed)
            for p in doomed:
                del model[p]
        assert positions(acks) == sorted(model)
        assert len(acks) == len(model)
