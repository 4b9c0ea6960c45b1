"""Hash ranges and the validation of STICKY consumers' declared ranges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.errors import ServerError
from magnetar.core.key_shared.hash_ranges import (
    ConsumerAssignError,
    HashRange,
    find_conflicting_consumer,
    merge_ranges,
    validate_sticky_ranges,
)


def test_range_basics() -> None:
    r = HashRange(10, 20)
    assert 10 in r and 20 in r and 9 not in r and 21 not in r
    assert r.size == 11
    assert str(r) == "[10, 20]"
    assert r.as_list() == [10, 20]
    assert r.overlaps(HashRange(20, 30)) and not r.overlaps(HashRange(21, 30))


def test_merge_joins_overlapping_and_touching_ranges() -> None:
    merged = merge_ranges([HashRange(30, 40), HashRange(0, 9), HashRange(10, 12), HashRange(35, 50)])
    assert merged == [HashRange(0, 12), HashRange(30, 50)]


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 30)), max_size=20))
def test_merge_preserves_the_set_of_hashes(pairs: list[tuple[int, int]]) -> None:
    ranges = [HashRange(start, start + length) for start, length in pairs]
    merged = merge_ranges(ranges)
    covered = {h for r in ranges for h in range(r.start, r.end + 1)}
    assert {h for r in merged for h in range(r.start, r.end + 1)} == covered
    for a, b in zip(merged, merged[1:], strict=False):
        assert a.end + 1 < b.start


def _error(ranges: list[tuple[int, int]] | None) -> str:
    with pytest.raises(ConsumerAssignError) as info:
        validate_sticky_ranges(ranges)
    assert info.value.code == ServerError.ConsumerAssignError
    return info.value.message


def test_validation_messages() -> None:
    assert _error(None) == "Must specify key shared meta for consumer."
    assert _error([]) == "Ranges for KeyShared policy must not be empty."
    assert _error([(5, 3)]) == "Fixed hash range start > end for range: [5,3]"
    assert _error([(0, 10), (10, 20)]) == "Consumer's own ranges conflict: [0,10] overlaps with [10,20]"
    assert _error([(60000, 65536)]) == "Fixed hash range [60000,65536] is outside the hash range [0,65535]"
    assert _error([(-1, 5)]) == "Fixed hash range [-1,5] is outside the hash range [0,65535]"


def test_valid_ranges_come_back_sorted() -> None:
    assert validate_sticky_ranges([(100, 200), (0, 99), (65535, 65535)]) == [
        HashRange(0, 99),
        HashRange(100, 200),
        HashRange(65535, 65535),
    ]


def test_find_conflicting_consumer() -> None:
    taken = [(HashRange(0, 9), "a"), (HashRange(20, 29), "b"), (HashRange(40, 49), "c")]
    assert find_conflicting_consumer([HashRange(10, 19)], taken) is None
    assert find_conflicting_consumer([HashRange(10, 20)], taken) == "b"
    assert find_conflicting_consumer([HashRange(5, 5)], taken) == "a"
    assert find_conflicting_consumer([HashRange(30, 100)], taken) == "c"
    assert find_conflicting_consumer([HashRange(50, 60), HashRange(0, 0)], taken) == "a"


@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 20)), max_size=8),
    st.tuples(st.integers(0, 220), st.integers(0, 20)),
)
def test_find_conflicting_consumer_matches_brute_force(
    pairs: list[tuple[int, int]], new: tuple[int, int]
) -> None:
    taken: list[tuple[HashRange, int]] = []
    for i, r in enumerate(merge_ranges(HashRange(s, s + n) for s, n in pairs)):
        taken.append((r, i))
    wanted = HashRange(new[0], new[0] + new[1])
    expected = next((c for r, c in taken if r.overlaps(wanted)), None)
    assert find_conflicting_consumer([wanted], taken) == expected
