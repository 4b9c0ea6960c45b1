"""One behaviour suite for both managed-ledger implementations (memory and segment files)."""

from __future__ import annotations

import concurrent.futures
import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.positions import BEFORE_START, Position
from magnetar.storage import MemoryLedgerFactory, SegmentLedgerFactory
from magnetar.storage.interfaces import (
    EntryNotFound,
    LedgerClosed,
    LedgerConfig,
    LedgerFactory,
    LedgerInfo,
    ManagedLedger,
    StorageError,
)

from .conftest import FIXED_CLOCK_MS, MakeFactory

TOPIC = "persistent://public/default/suite"


def payload(i: int) -> bytes:
    return f"entry-{i}|".encode() * (1 + i % 5)


def fill(ledger: ManagedLedger, count: int, start: int = 0) -> list[Position]:
    return [ledger.append(payload(i)) for i in range(start, start + count)]


def walk(ledger: ManagedLedger) -> list[Position]:
    """Every entry from the first, following next_position until the end position."""
    positions = []
    pos = ledger.first_position()
    end = ledger.next_position(ledger.last_position() or BEFORE_START)
    while pos is not None and pos != end:
        positions.append(pos)
        pos = ledger.next_position(pos)
    return positions


def test_empty_ledger(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    assert ledger.name == TOPIC
    assert ledger.first_position() is None
    assert ledger.last_position() is None
    assert ledger.ledgers() == [LedgerInfo(1, 0, 0, FIXED_CLOCK_MS)]
    assert ledger.total_size_bytes() == 0
    assert ledger.next_position(BEFORE_START) == Position(1, 0)
    assert ledger.entries_between(Position(0, 0), Position(99, 99)) == 0
    assert ledger.trim_before(Position(99, 0)) == []
    with pytest.raises(EntryNotFound):
        ledger.read(Position(1, 0))
    with pytest.raises(KeyError):
        ledger.read(Position(1, 0))


def test_append_assigns_consecutive_positions_readable_at_once(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    for i in range(20):
        pos = ledger.append(payload(i))
        assert pos == Position(1, i)
        assert ledger.read(pos) == payload(i)
    assert ledger.first_position() == Position(1, 0)
    assert ledger.last_position() == Position(1, 19)
    assert ledger.next_position(Position(1, 19)) == Position(1, 20)
    assert ledger.total_size_bytes() == sum(len(payload(i)) for i in range(20))
    with pytest.raises(EntryNotFound):
        ledger.read(Position(1, 20))
    with pytest.raises(EntryNotFound):
        ledger.read(Position(1, -1))


def test_rollover_at_max_entries_and_next_position_crosses_ledgers(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    positions = fill(ledger, 10)
    assert positions[:4] == [Position(1, 0), Position(1, 1), Position(1, 2), Position(2, 0)]
    assert [info.entries for info in ledger.ledgers()] == [3, 3, 3, 1]
    assert [info.ledger_id for info in ledger.ledgers()] == [1, 2, 3, 4]
    assert walk(ledger) == positions
    assert [ledger.read(p) for p in positions] == [payload(i) for i in range(10)]
    # Crossing a boundary, and the end is exactly where the next append lands.
    assert ledger.next_position(Position(1, 2)) == Position(2, 0)
    end = ledger.next_position(positions[-1])
    assert ledger.append(b"next") == end


def test_full_ledger_rolls_over_at_once(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=2)).open(TOPIC)
    fill(ledger, 2)
    assert [(info.ledger_id, info.entries) for info in ledger.ledgers()] == [(1, 2), (2, 0)]
    assert ledger.next_position(Position(1, 1)) == Position(2, 0)


def test_rollover_by_size(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_size_per_ledger_bytes=100)).open(TOPIC)
    positions = [ledger.append(b"x" * 40) for _ in range(5)]
    assert positions == [Position(1, 0), Position(1, 1), Position(1, 2), Position(2, 0), Position(2, 1)]
    assert [info.size_bytes for info in ledger.ledgers()] == [120, 80]


def test_roll_over_opens_next_ledger_unless_current_is_empty(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    ledger.roll_over()
    assert [info.ledger_id for info in ledger.ledgers()] == [1]
    first = ledger.append(b"a")
    ledger.roll_over()
    ledger.roll_over()
    assert [info.ledger_id for info in ledger.ledgers()] == [1, 2]
    assert ledger.next_position(first) == Position(2, 0)
    assert ledger.append(b"b") == Position(2, 0)
    assert ledger.last_position() == Position(2, 0)


def test_next_position_from_anywhere(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    fill(ledger, 7)  # ledgers 1:[0..2] 2:[0..2] 3:[0] and current 3
    assert ledger.next_position(BEFORE_START) == Position(1, 0)
    assert ledger.next_position(Position(1, -1)) == Position(1, 0)
    assert ledger.next_position(Position(1, -5)) == Position(1, 0)
    assert ledger.next_position(Position(0, 50)) == Position(1, 0)
    assert ledger.next_position(Position(1, 50)) == Position(2, 0)
    assert ledger.next_position(Position(3, 0)) == Position(3, 1)
    # Past the end (e.g. a cursor beyond a truncated tail): clamp to the end position.
    assert ledger.next_position(Position(3, 99)) == Position(3, 1)
    assert ledger.next_position(Position(999, 0)) == Position(3, 1)
    ledger.trim_before(Position(3, 0))
    assert ledger.next_position(Position(1, 1)) == Position(3, 0)


def test_iter_entries_is_a_scan_of_what_read_returns(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    positions = fill(ledger, 8)  # 1:[0..2] 2:[0..2] 3:[0..1]
    everything = [(pos, payload(i)) for i, pos in enumerate(positions)]
    assert list(ledger.iter_entries(BEFORE_START)) == everything
    assert list(ledger.iter_entries(Position(1, 1))) == everything[2:]
    assert list(ledger.iter_entries(Position(1, 2))) == everything[3:]
    assert list(ledger.iter_entries(Position(1, 50))) == everything[3:]
    assert list(ledger.iter_entries(positions[-1])) == []
    ledger.trim_before(Position(2, 0))
    assert list(ledger.iter_entries(BEFORE_START)) == everything[3:]
    scan = ledger.iter_entries(BEFORE_START)
    assert next(scan) == everything[3]
    ledger.append(b"late")  # appended to the ledger being read while the scan is suspended
    assert list(scan) == [*everything[4:], (Position(3, 2), b"late")]


def test_detached_scan_reads_a_range_on_another_thread_more_than_once(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    positions = fill(ledger, 8)  # 1:[0..2] 2:[0..2] 3:[0..1]
    ledger.flush()
    ledger.sync()
    everything = [(pos, payload(i)) for i, pos in enumerate(positions)]
    scan = ledger.detached_scan(Position(1, 1), Position(3, 0))
    ledger.append(b"after the scan was taken")
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        assert worker.submit(lambda: list(scan)).result() == everything[2:7]
        assert worker.submit(lambda: list(scan)).result() == everything[2:7]
    assert list(ledger.detached_scan(BEFORE_START, positions[-1])) == everything
    assert list(ledger.detached_scan(positions[-1], positions[-1])) == []


def test_entries_between(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=4)).open(TOPIC)
    fill(ledger, 10)  # 1:[0..3] 2:[0..3] 3:[0..1]
    assert ledger.entries_between(Position(1, 0), Position(3, 1)) == 10
    assert ledger.entries_between(Position(1, 2), Position(1, 2)) == 1
    assert ledger.entries_between(Position(1, 2), Position(2, 1)) == 4
    assert ledger.entries_between(Position(1, 3), Position(3, 0)) == 6
    assert ledger.entries_between(BEFORE_START, Position(99, 99)) == 10
    assert ledger.entries_between(Position(1, 5), Position(1, 9)) == 0
    assert ledger.entries_between(Position(2, 0), Position(1, 0)) == 0
    assert ledger.entries_between(Position(1, 0), Position(1, -1)) == 0
    ledger.trim_before(Position(2, 0))
    assert ledger.entries_between(BEFORE_START, Position(99, 99)) == 6


def test_trim_before_deletes_whole_ledgers_but_never_the_current(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    positions = fill(ledger, 8)  # 1:[0..2] 2:[0..2] 3:[0..1]
    size_before = ledger.total_size_bytes()
    assert ledger.trim_before(Position(2, 2)) == [1]  # ledger 2 still holds 2:2
    assert ledger.first_position() == Position(2, 0)
    with pytest.raises(EntryNotFound):
        ledger.read(positions[0])
    assert ledger.read(Position(2, 0)) == payload(3)
    assert ledger.total_size_bytes() == size_before - sum(len(payload(i)) for i in range(3))
    assert ledger.trim_before(Position(2, 2)) == []
    assert ledger.trim_before(Position(99, 0)) == [2]  # never the current ledger 3
    assert [info.ledger_id for info in ledger.ledgers()] == [3]
    assert walk(ledger) == positions[6:]


def test_trim_everything_leaves_an_empty_current_ledger(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(max_entries_per_ledger=2)).open(TOPIC)
    fill(ledger, 4)  # 1:[0,1] 2:[0,1] current 3 empty
    assert ledger.trim_before(Position(99, 0)) == [1, 2]
    assert ledger.first_position() is None
    assert ledger.last_position() is None
    assert ledger.next_position(BEFORE_START) == Position(3, 0)
    assert ledger.append(b"z") == Position(3, 0)


def test_ledger_ids_grow_across_topics(make_factory: MakeFactory) -> None:
    factory = make_factory(LedgerConfig(max_entries_per_ledger=1))
    a, b = factory.open(TOPIC + "-a"), factory.open(TOPIC + "-b")
    ids = [a.append(b"1").ledger_id, b.append(b"1").ledger_id, a.append(b"2").ledger_id]
    assert ids == sorted(set(ids))
    assert {info.ledger_id for info in a.ledgers()}.isdisjoint(info.ledger_id for info in b.ledgers())


def test_large_entries(make_factory: MakeFactory) -> None:
    ledger = make_factory(LedgerConfig(cache_max_bytes=1024 * 1024)).open(TOPIC)
    big = bytes(range(256)) * (5 * 4096)  # 5 MiB, larger than the cache
    small = ledger.append(b"small")
    pos = ledger.append(big)
    assert ledger.read(pos) == big
    assert ledger.read(small) == b"small"
    assert ledger.ledgers()[0].size_bytes == len(big) + 5


def test_refuses_empty_and_non_bytes_entries(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    with pytest.raises(ValueError, match="empty entry"):
        ledger.append(b"")
    with pytest.raises(TypeError):
        ledger.append("text")  # type: ignore[arg-type]
    assert ledger.last_position() is None


def append_all(ledger: ManagedLedger, entries: list[bytes]) -> list[Position]:
    """What a publisher's run does: append_many until every entry is in."""
    positions: list[Position] = []
    while len(positions) < len(entries):
        taken = ledger.append_many(entries[len(positions):])
        assert taken, "append_many appends at least the first entry"
        positions += taken
    return positions


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 120), min_size=1, max_size=40),
       runs=st.lists(st.integers(1, 12), min_size=1, max_size=40),
       max_entries=st.integers(1, 7), max_size=st.integers(1, 400))
def test_append_many_is_appending_one_at_a_time(sizes: list[int], runs: list[int], max_entries: int,
                                                max_size: int) -> None:
    config = LedgerConfig(max_entries_per_ledger=max_entries, max_size_per_ledger_bytes=max_size)
    entries = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
    with tempfile.TemporaryDirectory() as one_dir, tempfile.TemporaryDirectory() as many_dir:
        for kind in ("memory", "segment"):
            one, many = (
                MemoryLedgerFactory(itertools.count(1).__next__, config, clock_ms=lambda: 0) if kind == "memory"
                else SegmentLedgerFactory(data_dir, itertools.count(1).__next__, config, clock_ms=lambda: 0)
                for data_dir in (one_dir, many_dir)
            )
            by_one, by_many = one.open(TOPIC + kind), many.open(TOPIC + kind)
            expected = [by_one.append(entry) for entry in entries]
            got: list[Position] = []
            start = 0
            for run in itertools.cycle(runs):
                if start >= len(entries):
                    break
                got += append_all(by_many, entries[start:start + run])
                start += run
            assert got == expected
            assert by_many.ledgers() == by_one.ledgers()
            by_many.flush()
            assert [by_many.read(p) for p in got] == entries
            assert [data for _, data in by_many.iter_entries(BEFORE_START)] == entries
            by_one.close()
            by_many.close()


def test_append_many_stops_before_an_entry_no_ledger_stores(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    assert ledger.append_many([b"a", b"b", b"", b"c"]) == [Position(1, 0), Position(1, 1)]
    with pytest.raises(ValueError, match="empty entry"):
        ledger.append_many([b"", b"c"])
    assert ledger.append_many([b"c"]) == [Position(1, 2)]
    assert ledger.last_position() == Position(1, 2)


def test_sync_marks_appends_durable(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    assert ledger.sync() is None
    last = fill(ledger, 3)[-1]
    ledger.flush()
    assert ledger.unsynced()
    assert ledger.sync() == last
    assert not ledger.unsynced()
    assert ledger.sync() == last


def test_reopen_after_close_keeps_entries_and_starts_a_new_ledger(make_factory: MakeFactory) -> None:
    factory = make_factory(LedgerConfig(max_entries_per_ledger=4))
    ledger = factory.open(TOPIC)
    positions = fill(ledger, 10)
    ledger.close()
    ledger = factory.open(TOPIC)
    assert walk(ledger) == positions
    assert [ledger.read(p) for p in positions] == [payload(i) for i in range(10)]
    assert [(info.ledger_id, info.entries) for info in ledger.ledgers()] == [(1, 4), (2, 4), (3, 2), (4, 0)]
    # Never appended after the old tail: the next entry opens the new ledger.
    assert ledger.next_position(positions[-1]) == Position(4, 0)
    assert ledger.append(b"after") == Position(4, 0)
    ledger.close()
    ledger = factory.open(TOPIC)
    assert ledger.last_position() == Position(4, 0)
    assert [info.ledger_id for info in ledger.ledgers()] == [1, 2, 3, 4, 5]


def test_reopen_drops_ledgers_left_empty(make_factory: MakeFactory) -> None:
    factory = make_factory()
    ledger = factory.open(TOPIC)
    ledger.close()
    ledger = factory.open(TOPIC)
    assert [info.ledger_id for info in ledger.ledgers()] == [2]
    assert ledger.first_position() is None


def test_closed_ledger_refuses_use(make_factory: MakeFactory) -> None:
    factory = make_factory()
    ledger = factory.open(TOPIC)
    pos = ledger.append(b"a")
    ledger.close()
    ledger.close()
    with pytest.raises(LedgerClosed):
        ledger.append(b"b")
    with pytest.raises(LedgerClosed):
        ledger.read(pos)
    assert not ledger.unsynced()


def test_factory_refuses_a_second_open_of_a_live_ledger(make_factory: MakeFactory) -> None:
    factory = make_factory()
    ledger = factory.open(TOPIC)
    with pytest.raises(StorageError, match="already open"):
        factory.open(TOPIC)
    ledger.close()
    factory.open(TOPIC).close()


def test_delete_removes_all_data(make_factory: MakeFactory) -> None:
    factory = make_factory(LedgerConfig(max_entries_per_ledger=2))
    ledger = factory.open(TOPIC)
    fill(ledger, 5)
    ledger.delete()
    with pytest.raises(LedgerClosed):
        ledger.read(Position(1, 0))
    ledger = factory.open(TOPIC)
    assert ledger.first_position() is None
    assert len(ledger.ledgers()) == 1


# -- differential test: random operations give identical answers on both ---------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 300)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("trim"), st.integers(0, 40)),
        st.tuples(st.just("reopen"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops=_OPS, max_entries=st.integers(1, 6))
def test_memory_and_segment_ledgers_agree(ops: list[tuple[str, int]], max_entries: int) -> None:
    config = LedgerConfig(max_entries_per_ledger=max_entries, max_size_per_ledger_bytes=700)
    with tempfile.TemporaryDirectory() as data_dir:
        factories: list[LedgerFactory] = [
            MemoryLedgerFactory(itertools.count(1).__next__, config, clock_ms=lambda: 0),
            SegmentLedgerFactory(data_dir, itertools.count(1).__next__, config, clock_ms=lambda: 0),
        ]
        ledgers = [factory.open(TOPIC) for factory in factories]
        appended: list[Position] = []
        for step, (op, arg) in enumerate(ops):
            results: list[object] = []
            if op == "append":
                positions = [ledger.append(bytes([step % 256]) * arg) for ledger in ledgers]
                appended.append(positions[0])
                results += positions
            elif op == "roll":
                for ledger in ledgers:
                    ledger.roll_over()
            elif op == "trim":
                target = appended[min(arg, len(appended) - 1)] if appended else BEFORE_START
                results = [ledger.trim_before(target) for ledger in ledgers]
            else:
                for ledger in ledgers:
                    ledger.close()
                ledgers = [factory.open(TOPIC) for factory in factories]
            assert results[:1] == results[1:], (step, op)
            assert _observe(ledgers[0], appended) == _observe(ledgers[1], appended), (step, op)
        for ledger in ledgers:
            ledger.close()


def _observe(ledger: ManagedLedger, appended: list[Position]) -> object:
    reads: list[bytes | None] = []
    for pos in appended:
        try:
            reads.append(ledger.read(pos))
        except EntryNotFound:
            reads.append(None)
    probes = [*appended, BEFORE_START, Position(10**6, 0)]
    return (
        ledger.ledgers(),
        ledger.first_position(),
        ledger.last_position(),
        ledger.total_size_bytes(),
        walk(ledger),
        reads,
        [ledger.next_position(p) for p in probes],
        [ledger.entries_between(a, b) for a, b in itertools.combinations(probes[-6:], 2)],
        [list(ledger.iter_entries(p)) for p in [BEFORE_START, *appended[-3:]]],
    )


@pytest.mark.parametrize("kind", ["memory", "segment"])
def test_a_failed_rollover_keeps_the_entry_and_is_retried(kind: str, tmp_path: Path) -> None:
    ids = itertools.count(1)
    failures: list[Exception] = []

    def allocate() -> int:
        if failures:
            raise failures.pop()
        return next(ids)

    config = LedgerConfig(max_entries_per_ledger=2)
    factory: LedgerFactory = (
        MemoryLedgerFactory(allocate, config) if kind == "memory" else SegmentLedgerFactory(tmp_path, allocate, config)
    )
    ledger = factory.open(TOPIC)
    ledger.append(b"1")
    failures.append(RuntimeError("metadata store unavailable"))
    assert ledger.append(b"2") == Position(1, 1)  # stored, though the next ledger could not open
    assert ledger.read(Position(1, 1)) == b"2"
    assert ledger.append(b"3") == Position(2, 0)
    failures.append(RuntimeError("still unavailable"))
    ledger.append(b"4")
    failures.append(RuntimeError("and again"))
    with pytest.raises(RuntimeError, match="and again"):
        ledger.append(b"5")  # the retry happens before writing, so nothing is half done
    assert ledger.last_position() == Position(2, 1)
    assert ledger.append(b"5") == Position(3, 0)


@pytest.mark.parametrize(
    "bad",
    [{"max_entries_per_ledger": 0}, {"max_size_per_ledger_bytes": 0}, {"cache_max_entries": -1}],
)
def test_config_limits_are_validated(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        LedgerConfig(**bad)
