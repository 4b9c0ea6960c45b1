"""The cursor against a model: a plain set of acknowledged positions over a few ledgers.

Whatever mix of individual acks, cumulative acks, seeks and persist/restore round trips,
an entry is acknowledged exactly when the model says so, and the mark-delete position is
the end of the longest acknowledged prefix (the ranges kept beyond it are roaring
bitmaps per ledger; the model is the obvious set).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.acked_positions import AckedPositions
from magnetar.core.subscriptions.cursor import Cursor

#: ledger id -> entries; ledger 2 was trimmed away, ledger 5 is empty (the current one)
LEDGERS = {1: 5, 3: 4, 4: 6, 5: 0}
ALL = [Position(ledger, entry) for ledger, count in LEDGERS.items() for entry in range(count)]
END = Position(5, 0)


def next_position(pos: Position) -> Position:
    later = [p for p in ALL if p > pos]
    return later[0] if later else END


def model_mark_delete(acked: set[Position], floor: Position) -> Position:
    mark = floor
    for pos in ALL:
        if pos <= floor:
            continue
        if pos not in acked:
            break
        mark = pos
    return mark


POSITIONS = st.sampled_from(ALL)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("ack"), POSITIONS),
    st.tuples(st.just("cumulative"), POSITIONS),
    st.tuples(st.just("reset"), st.sampled_from([BEFORE_START, *ALL])),
    st.tuples(st.just("restore"), st.just(BEFORE_START)),
), max_size=80)


@given(STEPS)
def test_the_cursor_agrees_with_a_set_of_acked_positions(steps: list[tuple[str, Position]]) -> None:
    cursor = Cursor("s", BEFORE_START, next_position)
    acked: set[Position] = set()
    floor = BEFORE_START
    for verb, pos in steps:
        if verb == "ack":
            cursor.ack(pos)
            acked.add(pos)
        elif verb == "cumulative":
            cursor.ack_cumulative(pos)
            floor = max(floor, pos)
        elif verb == "reset":
            cursor.reset(pos)
            acked, floor = set(), pos
        else:
            restored = Cursor("s", cursor.mark_delete, next_position)
            restored.restore_ranges(cursor.deleted_ranges())
            cursor = restored
        floor = model_mark_delete(acked, floor)
        acked = {p for p in acked if p > floor}
        assert cursor.mark_delete == floor
        assert [p for p in ALL if cursor.is_acked(p)] == [p for p in ALL if p <= floor or p in acked]
        assert sorted(cursor.individually_deleted) == sorted(acked)


@given(st.sets(st.tuples(st.integers(1, 4), st.integers(0, 300))))
def test_ranges_cover_exactly_the_acked_positions(raw: set[tuple[int, int]]) -> None:
    acked = AckedPositions.of(Position(*p) for p in raw)
    covered = {Position(a.ledger_id, e) for a, b in acked.ranges() for e in range(a.entry_id, b.entry_id + 1)}
    assert covered == {Position(*p) for p in raw} and len(acked) == len(raw)
    ranges = acked.ranges()
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))
    # maximal: two ranges of one ledger never touch
    assert all(not (a[1].ledger_id == b[0].ledger_id and a[1].entry_id + 1 == b[0].entry_id)
               for a, b in zip(ranges, ranges[1:], strict=False))
