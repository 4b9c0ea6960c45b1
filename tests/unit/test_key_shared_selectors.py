"""The three Key_Shared selectors: seed 004's diagrams, collisions, STICKY errors, and properties."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.errors import ServerError
from magnetar.core.key_shared.consistent_hashing import (
    ConsistentHashingStickyKeyConsumerSelector,
    ring_point_hash,
)
from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    RemovedHashRanges,
    resolve_impacted_consumers,
)
from magnetar.core.key_shared.hash_range_auto_split import HashRangeAutoSplitStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_range_exclusive import HashRangeExclusiveStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_ranges import ConsumerAssignError, HashRange
from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.core.key_shared.sticky_key_consumer_selector import StickyKeyConsumerSelector
from magnetar.wire import pulsar_api_pb2 as pb

MAX = 65535
_ids = count(1)


@dataclass(eq=False)
class FakeConsumer:
    consumer_name: str
    consumer_id: int = field(default_factory=lambda: next(_ids))
    key_shared_meta: Any = None

    def __repr__(self) -> str:
        return f"{self.consumer_name}#{self.consumer_id}"


AutoSplit = HashRangeAutoSplitStickyKeyConsumerSelector[FakeConsumer]
Consistent = ConsistentHashingStickyKeyConsumerSelector[FakeConsumer]
Exclusive = HashRangeExclusiveStickyKeyConsumerSelector[FakeConsumer]


def sticky(name: str, *ranges: tuple[int, int]) -> FakeConsumer:
    meta = pb.KeySharedMeta(keySharedMode=pb.KeySharedMode.STICKY)
    for start, end in ranges:
        meta.hashRanges.add(start=start, end=end)
    return FakeConsumer(name, key_shared_meta=meta)


def layout(selector: StickyKeyConsumerSelector[FakeConsumer]) -> list[tuple[int, int, str]]:
    return [(r.start, r.end, c.consumer_name) for r, c in selector.snapshot()]


# -- AUTO_SPLIT, hash ranges ------------------------------------------------------------


def test_auto_split_joins_follow_the_seed_004_diagram() -> None:
    sel = AutoSplit()
    c1, c2, c3, c4 = (FakeConsumer(n) for n in ("C1", "C2", "C3", "C4"))
    assert sel.add_consumer(c1) == {}
    assert layout(sel) == [(0, MAX, "C1")]
    assert sel.add_consumer(c2) == {c1: RemovedHashRanges([HashRange(0, 32768)])}
    assert layout(sel) == [(0, 32768, "C2"), (32769, MAX, "C1")]
    assert sel.add_consumer(c3) == {c2: RemovedHashRanges([HashRange(0, 16384)])}
    assert layout(sel) == [(0, 16384, "C3"), (16385, 32768, "C2"), (32769, MAX, "C1")]
    assert sel.add_consumer(c4) == {c1: RemovedHashRanges([HashRange(32769, 49152)])}
    assert layout(sel) == [(0, 16384, "C3"), (16385, 32768, "C2"), (32769, 49152, "C4"), (49153, MAX, "C1")]
    assert sel.select(6067) is c3  # seed 004's "Order-3459134"
    assert sel.select(sticky_key_hash(b"Order-3459134")) is c3
    assert sel.consumer_key_hash_ranges()[c4] == [HashRange(32769, 49152)]


def test_auto_split_leaves_merge_right_or_left_at_the_end() -> None:
    sel = AutoSplit()
    c1, c2, c3, c4 = (FakeConsumer(n) for n in ("C1", "C2", "C3", "C4"))
    for c in (c1, c2, c3, c4):
        sel.add_consumer(c)
    # C4 leaves: its region joins the one on its right (C1)
    assert sel.remove_consumer(c4) == {c4: RemovedHashRanges([HashRange(32769, 49152)])}
    assert layout(sel) == [(0, 16384, "C3"), (16385, 32768, "C2"), (32769, MAX, "C1")]
    # C1 leaves: it was rightmost, so the region on its left (C2) takes it
    assert sel.remove_consumer(c1) == {c1: RemovedHashRanges([HashRange(32769, MAX)])}
    assert layout(sel) == [(0, 16384, "C3"), (16385, MAX, "C2")]
    assert sel.remove_consumer(c1) == {}  # unknown consumer: nothing happens
    sel.remove_consumer(c3)
    sel.remove_consumer(c2)
    assert layout(sel) == []
    assert sel.select(1) is None


def test_auto_split_runs_out_of_room() -> None:
    sel = AutoSplit(
        range_size=4
    )
    consumers = [FakeConsumer(f"c{i}") for i in range(4)]
    for c in consumers:
        sel.add_consumer(c)
    before = sel.snapshot()
    with pytest.raises(ConsumerAssignError, match="No more range can assigned to new consumer") as info:
        sel.add_consumer(FakeConsumer("late"))
    assert info.value.code == ServerError.ConsumerAssignError
    assert sel.snapshot() == before


def test_selectors_refuse_adding_the_same_consumer_twice() -> None:
    c = FakeConsumer("c")
    selectors: list[StickyKeyConsumerSelector[FakeConsumer]] = [AutoSplit(), Consistent()]
    for sel in selectors:
        sel.add_consumer(c)
        with pytest.raises(ValueError):
            sel.add_consumer(c)


# -- AUTO_SPLIT, consistent hashing ----------------------------------------------------


def test_consistent_hashing_spreads_hashes_and_keys_evenly() -> None:
    sel = Consistent()
    consumers = [FakeConsumer(f"consumer-{i}") for i in range(4)]
    for c in consumers:
        sel.add_consumer(c)
    owned = Counter({c: sum(r.size for r in rs) for c, rs in sel.consumer_key_hash_ranges().items()})
    assert sum(owned.values()) == MAX  # hashes 1..65535
    keys = Counter(sel.select(sticky_key_hash(f"key-{i}".encode())) for i in range(10_000))
    for c in consumers:
        assert 0.6 * MAX / 4 < owned[c] < 1.4 * MAX / 4
        assert 0.6 * 2500 < keys[c] < 1.4 * 2500


def test_consistent_hashing_join_takes_a_slice_from_everyone() -> None:
    sel = Consistent()
    old = [FakeConsumer(f"consumer-{i}") for i in range(3)]
    for c in old:
        sel.add_consumer(c)
    new = FakeConsumer("consumer-new")
    impacted = sel.add_consumer(new)
    assert impacted is not None and set(impacted) == set(old)
    lost = sorted(r for removed in impacted.values() for r in removed)
    assert lost == sel.consumer_key_hash_ranges()[new]


def _find_colliding_names() -> tuple[str, str, int]:
    points: dict[int, str] = {}
    for i in range(1000):
        name = f"c-{i}"
        mine = {ring_point_hash(name, 0, p) for p in range(100)}
        for h in mine:
            if h in points:
                return points[h], name, h
        for h in mine:
            points[h] = name
    raise AssertionError("no collision found")


def test_collision_first_added_wins_and_the_next_in_line_takes_over() -> None:
    first_name, second_name, point = _find_colliding_names()
    sel = Consistent()
    first, second = FakeConsumer(first_name), FakeConsumer(second_name)
    sel.add_consumer(first)
    sel.add_consumer(second)
    assert sel.select(point) is first
    sel.remove_consumer(first)
    assert sel.select(point) is second
    sel.add_consumer(first)  # back of the queue now
    assert sel.select(point) is second
    sel.remove_consumer(second)
    assert sel.select(point) is first


def test_a_consumer_whose_own_points_collide_comes_and_goes_cleanly() -> None:
    name = next(
        f"self-{i}"
        for i in range(10_000)
        if len({ring_point_hash(f"self-{i}", 0, p) for p in range(100)}) < 100
    )
    sel = Consistent()
    other, me = FakeConsumer("other"), FakeConsumer(name)
    sel.add_consumer(other)
    alone = sel.snapshot()
    sel.add_consumer(me)
    sel.remove_consumer(me)
    assert sel.snapshot() == alone


def test_same_name_consumers_get_their_own_points_and_a_rejoin_lands_on_the_same_ones() -> None:
    sel = Consistent()
    a, b = FakeConsumer("same"), FakeConsumer("same")
    sel.add_consumer(a)
    sel.add_consumer(b)
    ranges = sel.consumer_key_hash_ranges()
    assert set(ranges) == {a, b}
    assert 0.3 * MAX < sum(r.size for r in ranges[a]) < 0.7 * MAX
    b_layout = ranges[b]
    sel.remove_consumer(b)
    b2 = FakeConsumer("same")
    sel.add_consumer(b2)
    assert sel.consumer_key_hash_ranges()[b2] == b_layout


def test_consistent_hashing_snapshot_starts_at_1_and_wraps_to_the_first_point() -> None:
    sel = Consistent(
        replica_points=1
    )
    c = FakeConsumer("solo")
    sel.add_consumer(c)
    assert layout(sel) == [(1, MAX, "solo")]
    assert all(sel.select(h) is c for h in (1, 100, MAX))


def test_untracked_selectors_return_none_but_still_snapshot() -> None:
    sel = Consistent(
        track_impacted_consumers=False
    )
    c = FakeConsumer("c")
    assert sel.add_consumer(c) is None
    assert layout(sel) == [(1, MAX, "c")]
    assert sel.remove_consumer(c) is None


# -- STICKY ------------------------------------------------------------------------------


def test_sticky_seed_004_example() -> None:
    sel = Exclusive()
    c1 = sticky("C1", (0, 16383), (32768, 49151))
    c2 = sticky("C2", (16384, 32767), (49152, 65535))
    assert sel.add_consumer(c1) == {}
    assert sel.add_consumer(c2) == {}
    assert sel.select(6067) is c1
    assert sel.select(20000) is c2 and sel.select(40000) is c1 and sel.select(MAX) is c2
    assert [str(r) for r in sel.consumer_key_hash_ranges()[c1]] == ["[0, 16383]", "[32768, 49151]"]


def test_sticky_conflict_is_refused_and_changes_nothing() -> None:
    sel = Exclusive()
    c1 = sticky("c1", (0, 99))
    sel.add_consumer(c1)
    before = sel.snapshot()
    intruder = sticky("c2", (200, 300), (50, 150))
    assert sel.conflicting_consumer(intruder) is c1
    with pytest.raises(ConsumerAssignError) as info:
        sel.add_consumer(intruder)
    assert info.value.message == f"Range conflict with consumer consumerName=c1, consumerId={c1.consumer_id}"
    assert sel.snapshot() == before and intruder not in sel
    assert sel.select(250) is None


def test_sticky_invalid_ranges_are_refused_and_change_nothing() -> None:
    sel = Exclusive()
    for bad, message in [
        (FakeConsumer("no-meta"), "Must specify key shared meta for consumer."),
        (sticky("empty"), "Ranges for KeyShared policy must not be empty."),
        (sticky("reversed", (10, 5)), "Fixed hash range start > end for range: [10,5]"),
        (
            sticky("self-overlap", (0, 10), (5, 20)),
            "Consumer's own ranges conflict: [0,10] overlaps with [5,20]",
        ),
        (sticky("too-big", (0, 70000)), "Fixed hash range [0,70000] is outside the hash range [0,65535]"),
    ]:
        with pytest.raises(ConsumerAssignError) as info:
            sel.add_consumer(bad)
        assert info.value.message == message
        assert len(sel.snapshot()) == 0 and bad not in sel


def test_sticky_freed_range_can_be_claimed_again_and_unclaimed_hashes_go_nowhere() -> None:
    sel = Exclusive()
    c1 = sticky("c1", (0, 99), (1000, 1099))
    sel.add_consumer(c1)
    assert sel.select(500) is None
    assert sel.remove_consumer(c1) == {c1: RemovedHashRanges([HashRange(0, 99), HashRange(1000, 1099)])}
    c2 = sticky("c2", (50, 60))
    assert sel.add_consumer(c2) == {}
    assert sel.select(55) is c2 and sel.select(0) is None


def test_sticky_ranges_can_come_from_anywhere() -> None:
    ranges = {"a": [(0, 10)], "b": [(11, 20)]}
    sel = Exclusive(
        ranges_of=lambda c: ranges[c.consumer_name]
    )
    a, b = FakeConsumer("a"), FakeConsumer("b")
    sel.add_consumer(a)
    sel.add_consumer(b)
    assert layout(sel) == [(0, 10, "a"), (11, 20, "b")]


# -- properties common to all selectors --------------------------------------------------

POOL = [FakeConsumer(f"p{i}") for i in range(6)]
STICKY_POOL = [sticky(f"s{i}", (i * 10_000, i * 10_000 + 4_999), (i * 10_000 + 7_000, i * 10_000 + 7_999))
               for i in range(6)]


def _check_select_matches_snapshot(selector: StickyKeyConsumerSelector[FakeConsumer], full: bool) -> None:
    s = selector.snapshot()
    points = {1, MAX}
    for r, _ in s:
        points.update((r.start, r.end, r.start - 1, r.end + 1))
    for h in points:
        if 1 <= h <= MAX:
            assert selector.select(h) == s.select(h), h
    if full and len(s):
        # AUTO_SPLIT covers every hash: no gaps between ranges
        assert sum(r.size for r, _ in s) >= MAX


def _exhaustive_diff_check(
    before: ConsumerHashAssignmentsSnapshot[FakeConsumer],
    after: ConsumerHashAssignmentsSnapshot[FakeConsumer],
    impacted: dict[FakeConsumer, RemovedHashRanges],
) -> None:
    assert impacted == resolve_impacted_consumers(before, after)
    # sample the whole space at a stride plus every boundary
    points = set(range(1, MAX + 1, 97))
    for s in (before, after):
        for r, _ in s:
            points.update((r.start, r.end))
    for h in points:
        old, new = before.select(h), after.select(h)
        for consumer, removed in impacted.items():
            assert (h in removed) == (consumer == old and old != new)
        if old is not None and old != new:
            assert old in impacted


def make_selector(kind: str) -> StickyKeyConsumerSelector[FakeConsumer]:
    if kind == "auto_split":
        return AutoSplit()
    if kind == "consistent":
        return Consistent(replica_points=20)
    if kind == "consistent_colliding":
        # thousands of points per consumer: many collisions, many takeovers
        return Consistent(replica_points=3000)
    return Exclusive()


@pytest.mark.parametrize("kind", ["auto_split", "consistent", "consistent_colliding", "sticky"])
@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=25))
def test_any_sequence_of_joins_and_leaves_keeps_one_owner_per_hash_and_reports_every_move(
    kind: str, ops: list[tuple[bool, int]]
) -> None:
    selector = make_selector(kind)
    pool = STICKY_POOL if kind == "sticky" else POOL
    present: set[FakeConsumer] = set()
    for add, i in ops:
        consumer = pool[i]
        before = selector.snapshot()
        if add and consumer not in present:
            impacted = selector.add_consumer(consumer)
            present.add(consumer)
        elif not add:
            impacted = selector.remove_consumer(consumer)
            present.discard(consumer)
        else:
            continue
        after = selector.snapshot()
        assert impacted is not None
        _exhaustive_diff_check(before, after, impacted)
        _check_select_matches_snapshot(selector, full=kind != "sticky")
        assert set(after.ranges_by_consumer()) <= present
        if kind != "sticky":
            assert set(after.ranges_by_consumer()) == present or kind.startswith("consistent")
        if add and kind != "sticky":
            # a join only takes hashes for the newcomer
            for removed in impacted.values():
                for r in removed:
                    assert all(after.select(h) is consumer for h in (r.start, r.end))


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=25))
def test_each_ring_point_is_held_by_its_earliest_arrival_still_present(ops: list[tuple[bool, int]]) -> None:
    selector = Consistent(replica_points=3000)
    points = {c: {ring_point_hash(c.consumer_name, 0, i) for i in range(3000)} for c in POOL}
    arrivals: list[FakeConsumer] = []  # present consumers, in order of arrival
    for add, i in ops:
        consumer = POOL[i]
        if add and consumer not in arrivals:
            selector.add_consumer(consumer)
            arrivals.append(consumer)
        elif not add and consumer in arrivals:
            selector.remove_consumer(consumer)
            arrivals.remove(consumer)
    for point in set().union(*(points[c] for c in arrivals)):
        expected = next(c for c in arrivals if point in points[c])
        assert selector.select(point) is expected
