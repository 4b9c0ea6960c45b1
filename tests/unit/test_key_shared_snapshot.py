"""ConsumerHashAssignmentsSnapshot: validation, lookups, and the diff that starts draining."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    RemovedHashRanges,
    resolve_impacted_consumers,
)
from magnetar.core.key_shared.hash_ranges import HashRange

Snapshot = ConsumerHashAssignmentsSnapshot[str]
MAX = 65535


def snap(*items: tuple[int, int, str]) -> Snapshot:
    return ConsumerHashAssignmentsSnapshot((HashRange(s, e), c) for s, e, c in items)


def test_validation() -> None:
    with pytest.raises(ValueError, match="sorted and disjoint"):
        snap((10, 20, "a"), (0, 5, "b"))
    with pytest.raises(ValueError, match="sorted and disjoint"):
        snap((0, 10, "a"), (10, 20, "b"))
    with pytest.raises(ValueError, match="outside"):
        snap((0, 65536, "a"))
    with pytest.raises(ValueError, match="empty"):
        snap((5, 4, "a"))
    with pytest.raises(ValueError, match="no consumer"):
        ConsumerHashAssignmentsSnapshot([(HashRange(0, 1), None)])


def test_select_and_ranges_by_consumer() -> None:
    s = snap((0, 9, "a"), (10, 19, "b"), (20, 29, "a"), (40, 49, "a"))
    assert [s.select(h) for h in (0, 9, 10, 19, 20, 30, 39, 40, 49, 50, MAX)] == [
        "a", "a", "b", "b", "a", None, None, "a", "a", None, None,
    ]
    assert s.ranges_by_consumer() == {"a": [HashRange(0, 9), HashRange(20, 29), HashRange(40, 49)],
                                      "b": [HashRange(10, 19)]}
    touching = snap((0, 9, "a"), (10, 19, "a"))
    assert touching.ranges_by_consumer() == {"a": [HashRange(0, 19)]}


def test_equality_and_empty() -> None:
    assert snap((0, 9, "a")) == snap((0, 9, "a"))
    assert snap((0, 9, "a")) != snap((0, 9, "b"))
    assert len(ConsumerHashAssignmentsSnapshot.empty()) == 0


def test_diff_reports_only_losers() -> None:
    before = snap((0, MAX, "c1"))
    after = snap((0, 32768, "c2"), (32769, MAX, "c1"))
    assert before.resolve_impacted_consumers(after) == {"c1": RemovedHashRanges([HashRange(0, 32768)])}
    # the joiner gained, lost nothing; the reverse change impacts c2 only
    assert resolve_impacted_consumers(after, before) == {"c2": RemovedHashRanges([HashRange(0, 32768)])}


def test_diff_finds_hashes_that_became_unowned_inside_a_partial_overlap() -> None:
    # Pulsar's pairwise walk misses [1, 4] here: it was a's and is nobody's now
    before = snap((1, 10, "a"))
    after = snap((5, 10, "b"))
    assert resolve_impacted_consumers(before, after) == {"a": RemovedHashRanges([HashRange(1, 10)])}
    after_same = snap((5, 10, "a"))
    assert resolve_impacted_consumers(before, after_same) == {"a": RemovedHashRanges([HashRange(1, 4)])}


def test_diff_merges_adjacent_lost_pieces() -> None:
    before = snap((0, 9, "a"), (10, 19, "a"), (20, 29, "b"))
    after = snap((0, 29, "c"))
    impacted = resolve_impacted_consumers(before, after)
    assert impacted["a"].ranges == (HashRange(0, 19),)
    assert impacted["b"].ranges == (HashRange(20, 29),)


def test_removed_hash_ranges_lookup() -> None:
    removed = RemovedHashRanges([HashRange(30, 40), HashRange(1, 5)])
    assert [h in removed for h in (0, 1, 5, 6, 29, 30, 40, 41)] == [
        False, True, True, False, False, True, True, False,
    ]
    assert removed.contains_sticky_key_hash(33)
    assert list(removed) == [HashRange(1, 5), HashRange(30, 40)]


CONSUMERS = ["a", "b", "c", "d"]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """A random partition of 0..65535 into pieces, each owned by a consumer or nobody."""
    cuts = sorted(set(draw(st.lists(st.integers(1, MAX), max_size=12))))
    bounds = [0, *cuts, MAX + 1]
    items = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        owner = draw(st.sampled_from([*CONSUMERS, None]))
        if owner is not None:
            items.append((start, end - 1, owner))
    return snap(*items)


def _breakpoints(*snapshots_: Snapshot) -> list[int]:
    points = {0}
    for s in snapshots_:
        for r, _ in s:
            points.update((r.start, r.end + 1))
    return sorted(p for p in points if p <= MAX)


@given(snapshots(), snapshots())
def test_diff_reports_exactly_the_hashes_whose_owner_changed(before: Snapshot, after: Snapshot) -> None:
    impacted = resolve_impacted_consumers(before, after)
    breaks = _breakpoints(before, after)
    # owners are constant between breakpoints, so checking both ends of each piece is exhaustive
    for start, end in zip(breaks, [*breaks[1:], MAX + 1], strict=False):
        for h in (start, end - 1):
            old, new = before.select(h), after.select(h)
            for consumer in CONSUMERS:
                lost = consumer in impacted and h in impacted[consumer]
                assert lost == (consumer == old and old != new), (h, consumer, old, new)
    for removed in impacted.values():
        assert len(removed) > 0
        for r in removed:
            assert r.start in breaks and (r.end + 1 in breaks or r.end == MAX)


@given(snapshots())
def test_no_change_no_impact(s: Snapshot) -> None:
    assert resolve_impacted_consumers(s, s) == {}
    assert resolve_impacted_consumers(ConsumerHashAssignmentsSnapshot.empty(), s) == {}
