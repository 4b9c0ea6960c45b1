"""Byte pieces joined into runs of a least size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.wire.gathering import gathered


@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(min_value=1, max_value=100))
def test_runs_keep_the_bytes_in_order_and_only_the_last_is_short(pieces: list[bytes], size: int) -> None:
    runs = list(gathered(pieces, size))
    assert b"".join(runs) == b"".join(pieces)
    assert all(runs), "no run is empty"
    assert all(len(run) >= size for run in runs[:-1])


def test_pieces_are_not_split() -> None:
    assert list(gathered([b"abc", b"de", b"", b"fghij", b"k"], 4)) == [b"abcde", b"fghij", b"k"]
    assert list(gathered([b"", b""], 4)) == []
