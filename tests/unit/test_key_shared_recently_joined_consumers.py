"""The classic mode's recently joined consumers with PIP-282's last sent position (seed 003)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.key_shared.recently_joined_consumers import PositionRangeSet, RecentlyJoinedConsumers
from magnetar.core.positions import Position

_ids = count(1)


@dataclass(eq=False)
class FakeConsumer:
    consumer_name: str
    consumer_id: int = field(default_factory=lambda: next(_ids))


def P(text: str) -> Position:
    return Position.parse(text)


def Ps(ledger: int, first: int, last: int) -> list[Position]:
    return [Position(ledger, e) for e in range(first, last + 1)]


def test_seed_003_last_sent_position_example() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("3:0"))
    rjc.prepare_dispatch()
    assert rjc.last_sent_position == P("3:0")
    rjc.entries_sent([*Ps(3, 1, 3), P("3:5"), *Ps(3, 8, 10)])
    assert rjc.last_sent_position == P("3:3")
    assert rjc.individually_sent_positions_stat() == "[(3:4..3:5],(3:7..3:10]]"
    rjc.entries_sent([P("3:7")])
    assert rjc.last_sent_position == P("3:3")
    assert rjc.individually_sent_positions_stat() == "[(3:4..3:5],(3:6..3:10]]"
    rjc.entries_sent([P("3:6")])
    assert rjc.individually_sent_positions_stat() == "[(3:4..3:10]]"
    rjc.entries_sent([P("3:4")])
    assert rjc.last_sent_position == P("3:10")
    assert rjc.individually_sent_positions_stat() == "[]"


def test_seed_003_issue_1_new_consumer_waits_for_entries_after_the_last_sent_position() -> None:
    c1, c2, c3 = FakeConsumer("c1"), FakeConsumer("c2"), FakeConsumer("c3")
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:5"))
    rjc.consumer_added(c1, consumer_count=1, entries_since_first_not_acked=0)
    rjc.consumer_added(c2, consumer_count=2, entries_since_first_not_acked=0)
    # 1:6..1:11 were read; 1:6 went to c1 (one permit), 1:9..1:11 to c2, 1:7 and 1:8 wait
    rjc.prepare_dispatch()
    rjc.entries_sent([P("1:6"), *Ps(1, 9, 11)])
    assert rjc.last_sent_position == P("1:6")
    assert rjc.individually_sent_positions_stat() == "[(1:8..1:11]]"
    assert rjc.consumer_added(c3, consumer_count=3, entries_since_first_not_acked=6) == P("1:6")
    assert rjc.last_sent_position_when_joining(c3) == P("1:6")
    # key-a now maps to c3: 1:7 and 1:8 must not go there while c1 holds 1:6
    assert not rjc.can_dispatch(c3, P("1:7"), replay=True)
    assert not rjc.can_dispatch(c3, P("1:8"), replay=False)
    assert rjc.can_dispatch(c2, P("1:12"), replay=False)  # others are not held back
    # c1 disconnects: 1:6 is replayed to c3 first, then 1:7 and 1:8 once 1:6 is acked
    assert not rjc.consumer_removed(c1, remaining_consumers=2)
    assert rjc.can_dispatch(c3, P("1:6"), replay=True)
    rjc.entries_sent([P("1:6")])
    assert rjc.mark_delete_position_moved(P("1:6"))
    assert c3 not in rjc
    assert rjc.can_dispatch(c3, P("1:7"), replay=True)


def test_seed_003_issue_2_replayed_newer_entry_waits_for_the_older_one() -> None:
    c1, c2, c3 = FakeConsumer("c1"), FakeConsumer("c2"), FakeConsumer("c3")
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("2:0"))
    rjc.consumer_added(c1, 1, 0)
    rjc.consumer_added(c2, 2, 0)
    rjc.prepare_dispatch()
    rjc.entries_sent([P("2:1")])  # 2:2 found c1 without permits: it went to the replay queue
    assert rjc.last_sent_position == P("2:1")
    assert rjc.consumer_added(c3, 3, entries_since_first_not_acked=2) == P("2:1")
    assert not rjc.can_dispatch(c3, P("2:2"), replay=True)
    rjc.consumer_removed(c1, remaining_consumers=2)
    assert rjc.can_dispatch(c3, P("2:1"), replay=True)
    rjc.entries_sent([P("2:1")])
    assert not rjc.can_dispatch(c3, P("2:2"), replay=True)
    assert rjc.mark_delete_position_moved(P("2:1"))
    assert rjc.can_dispatch(c3, P("2:2"), replay=True)


def test_joining_alone_or_with_nothing_outstanding_holds_nobody_back() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:-1"))
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    assert rjc.consumer_added(a, 1, 5) is None  # nothing was ever dispatched
    rjc.prepare_dispatch()
    assert rjc.consumer_added(b, 1, 5) == P("1:-1")
    assert rjc.consumer_added(c, 2, 1) == P("1:-1")
    assert len(rjc) == 0
    assert rjc.last_sent_position_when_joining(c) == P("1:-1")


def test_replays_respect_the_earliest_joiner() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:0"))
    rjc.prepare_dispatch()
    old, early, late = FakeConsumer("old"), FakeConsumer("early"), FakeConsumer("late")
    rjc.consumer_added(old, 1, 0)
    rjc.entries_sent(Ps(1, 1, 5))
    rjc.consumer_added(early, 2, 5)
    rjc.entries_sent(Ps(1, 6, 8))
    rjc.consumer_added(late, 3, 8)
    assert rjc.recently_joined == {early: P("1:5"), late: P("1:8")}
    assert rjc.max_last_sent_position(late, replay=False) == P("1:8")
    assert rjc.max_last_sent_position(late, replay=True) == P("1:5")
    assert rjc.max_last_sent_position(old, replay=True) is None
    assert rjc.mark_delete_position_moved(P("1:5"))
    assert rjc.recently_joined == {late: P("1:8")}
    assert not rjc.mark_delete_position_moved(P("1:7"))


def test_consumer_removal_clears_state_when_it_no_longer_matters() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:0"))
    rjc.prepare_dispatch()
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c")
    rjc.consumer_added(a, 1, 0)
    rjc.entries_sent([P("1:1"), P("1:3")])
    rjc.consumer_added(b, 2, 3)
    rjc.consumer_added(c, 3, 3)
    assert len(rjc) == 2
    rjc.consumer_removed(a, remaining_consumers=2)
    assert len(rjc) == 2
    rjc.consumer_removed(b, remaining_consumers=1)
    assert len(rjc) == 0  # a single consumer needs no ordering guard
    rjc.consumer_removed(c, remaining_consumers=0)
    assert rjc.last_sent_position is None and rjc.individually_sent_positions_stat() == "[]"


def test_mark_delete_pushes_the_last_sent_position() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:0"))
    rjc.prepare_dispatch()
    rjc.entries_sent([P("1:1"), P("1:5"), *Ps(1, 8, 9)])
    rjc.mark_delete_position_moved(P("1:6"))
    assert rjc.last_sent_position == P("1:6")
    assert rjc.individually_sent_positions_stat() == "[(1:7..1:9]]"
    rjc.mark_delete_position_moved(P("1:7"))
    assert rjc.last_sent_position == P("1:9")
    assert rjc.individually_sent_positions_stat() == "[]"
    rjc.mark_delete_position_moved(P("1:6"))  # never backwards
    assert rjc.last_sent_position == P("1:9")
    rjc.entries_sent([P("1:10")])
    assert rjc.last_sent_position == P("1:10")
    assert rjc.individually_sent_positions_stat() == "[]"


def test_first_dispatch_starts_from_the_cursors_acked_ranges() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:2"))
    rjc.prepare_dispatch(acked_ranges=[(P("1:3"), P("1:6"))])
    assert rjc.last_sent_position == P("1:2")
    rjc.entries_sent([P("1:3")])
    assert rjc.last_sent_position == P("1:6")


@dataclass
class TwoLedgers:
    """Ledger 1 holds entries 0..4, ledger 2 follows."""

    def previous_position(self, position: Position) -> Position:
        if position == Position(2, 0):
            return Position(1, 4)
        return Position(position.ledger_id, position.entry_id - 1)

    def next_position(self, position: Position) -> Position:
        if position == Position(1, 4):
            return Position(2, 0)
        return Position(position.ledger_id, position.entry_id + 1)


def test_a_navigator_lets_the_last_sent_position_cross_ledgers() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(
        mark_delete_position=P("1:-1"), navigator=TwoLedgers()
    )
    rjc.prepare_dispatch()
    rjc.entries_sent([*Ps(2, 0, 2), *Ps(1, 1, 4)])
    assert rjc.last_sent_position == P("1:-1")
    rjc.entries_sent([P("1:0")])
    assert rjc.last_sent_position == P("2:2")


def test_stats() -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("4:0"))
    rjc.prepare_dispatch()
    a, b = FakeConsumer("a"), FakeConsumer("b")
    rjc.consumer_added(a, 1, 0)
    rjc.entries_sent([P("4:1"), P("4:3")])
    rjc.consumer_added(b, 2, 3)
    name = f"consumerName=b, consumerId={b.consumer_id}"
    assert rjc.consumers_after_mark_delete_position() == {name: "4:1"}
    with_address = rjc.consumers_after_mark_delete_position(lambda c: "/127.0.0.1:5000")
    assert with_address == {f"{name}, address=/127.0.0.1:5000": "4:1"}
    assert rjc.individually_sent_positions_stat() == "[(4:2..4:3]]"


def test_position_range_set() -> None:
    s = PositionRangeSet()
    s.add(P("1:0"), P("1:2"))
    s.add(P("1:5"), P("1:7"))
    s.add(P("1:2"), P("1:3"))  # touches the first
    assert str(s) == "[(1:0..1:3],(1:5..1:7]]"
    assert P("1:1") in s and P("1:0") not in s and P("1:4") not in s
    assert s.range_containing(P("1:6")) == (P("1:5"), P("1:7"))
    s.add(P("1:3"), P("1:5"))
    assert str(s) == "[(1:0..1:7]]"
    s.remove_at_most(P("1:4"))
    assert str(s) == "[(1:4..1:7]]"
    s.remove_at_most(P("1:7"))
    assert len(s) == 0


@given(st.permutations(list(range(1, 25))), st.integers(0, 24))
def test_last_sent_is_the_end_of_the_sent_prefix(order: list[int], how_many: int) -> None:
    rjc: RecentlyJoinedConsumers[FakeConsumer] = RecentlyJoinedConsumers(mark_delete_position=P("1:0"))
    rjc.prepare_dispatch()
    sent: set[int] = set()
    for chunk_start in range(0, how_many, 3):
        chunk = order[chunk_start:min(chunk_start + 3, how_many)]
        rjc.entries_sent([Position(1, e) for e in chunk])
        sent.update(chunk)
        prefix = 0
        while prefix + 1 in sent:
            prefix += 1
        assert rjc.last_sent_position == Position(1, prefix)
        beyond = {e for e in sent if e > prefix}
        assert {e for e in range(1, 26) if Position(1, e) in rjc.individually_sent_positions} == beyond
