"""The tail caches of all ledgers share one memory limit (``managedLedgerCacheSizeMB``), on real files."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage.entry_cache_budget import EntryCacheBudget, cache_budget
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory

ENTRY = 10_000  # bytes per entry
CONFIG = LedgerConfig(cache_max_entries=1000, cache_max_bytes=16 * 1024 * 1024)


def factory(tmp_path: Path, limit_bytes: int) -> tuple[SegmentLedgerFactory, EntryCacheBudget]:
    budget = EntryCacheBudget(limit_bytes)
    return SegmentLedgerFactory(tmp_path, itertools.count(1).__next__, CONFIG, cache_budget=budget), budget


def fill(ledger: SegmentLedger, count: int, tag: str) -> list[Position]:
    positions = [ledger.append(tag.encode().ljust(ENTRY, b".")) for _ in range(count)]
    ledger.flush()
    return positions


def test_many_ledgers_hold_no_more_than_the_budget(tmp_path: Path) -> None:
    """Each ledger alone is far below its own cap (16 MB); together they would hold 4 MB."""
    ledgers_factory, budget = factory(tmp_path, limit_bytes=50 * ENTRY)
    ledgers = [ledgers_factory.open(f"persistent://t/n/topic-{i}") for i in range(20)]
    for i, ledger in enumerate(ledgers):
        fill(ledger, 20, f"t{i}")
        assert budget.used_bytes <= budget.limit_bytes
    assert budget.used_bytes > 0 and budget.evicted_caches > 0
    for i, ledger in enumerate(ledgers):  # nothing is lost: what left the cache is read from the file
        first = ledger.first_position()
        assert first is not None
        assert all(ledger.read(Position(first.ledger_id, e)).startswith(f"t{i}.".encode()) for e in range(20))
    for ledger in ledgers:
        ledger.close()
    assert budget.used_bytes == 0, "closed ledgers give their cached bytes back"


def test_the_least_recently_appended_ledger_gives_way(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    ledgers_factory, budget = factory(tmp_path, limit_bytes=30 * ENTRY)
    idle, busy = ledgers_factory.open("persistent://t/n/idle"), ledgers_factory.open("persistent://t/n/busy")
    idle_positions = fill(idle, 20, "idle")
    busy_positions = fill(busy, 20, "busy")
    reads: list[int] = request.getfixturevalue("disk_reads")  # counted from here on
    assert [busy.read(p)[:4] for p in busy_positions] == [b"busy"] * 20
    assert reads == [], "the ledger appending now keeps its tail in memory"
    assert [idle.read(p)[:4] for p in idle_positions] == [b"idle"] * 20
    assert len(reads) == 20, "the idle ledger's cache was emptied for it"
    assert budget.used_bytes == 20 * ENTRY


def test_a_ledger_alone_over_the_budget_keeps_its_newest_entries(tmp_path: Path,
                                                                 request: pytest.FixtureRequest) -> None:
    ledgers_factory, budget = factory(tmp_path, limit_bytes=5 * ENTRY)
    ledger = ledgers_factory.open("persistent://t/n/big")
    positions = fill(ledger, 12, "big")
    assert budget.used_bytes == 5 * ENTRY
    reads: list[int] = request.getfixturevalue("disk_reads")  # counted from here on
    assert all(ledger.read(p)[:3] == b"big" for p in positions[-5:])
    assert reads == []
    assert all(ledger.read(p)[:3] == b"big" for p in positions[:7])
    assert len(reads) == 7


def test_trimmed_and_taken_back_entries_give_their_bytes_back(tmp_path: Path) -> None:
    ledgers_factory, budget = factory(tmp_path, limit_bytes=100 * ENTRY)
    ledger = ledgers_factory.open("persistent://t/n/trim")
    fill(ledger, 5, "a")
    ledger.roll_over()
    last = fill(ledger, 5, "b")[-1]
    assert budget.used_bytes == 10 * ENTRY
    ledger.trim_before(Position(last.ledger_id, 0))
    assert budget.used_bytes == 5 * ENTRY
    ledger.delete()
    assert budget.used_bytes == 0


def test_a_budget_of_nothing_and_bad_sizes() -> None:
    assert cache_budget(0).limit_bytes == 0
    assert cache_budget(3).limit_bytes == 3 * 1024 * 1024
    assert cache_budget(None).limit_bytes > 0, "unset: a share of the machine's memory"
    with pytest.raises(ValueError, match="must not be negative"):
        EntryCacheBudget(-1)


class _Stubborn:
    """A cache that frees nothing when asked."""

    def release_all(self) -> None:
        pass


def test_making_room_asks_each_other_cache_once_and_ends() -> None:
    budget = EntryCacheBudget(10)
    stubborn, other, mine = _Stubborn(), _Stubborn(), _Stubborn()
    budget.added(stubborn, 8)
    budget.added(other, 8)
    budget.added(mine, 8)
    budget.make_room(mine)
    assert budget.evicted_caches == 2
    assert budget.over(), "nothing was freed, and the caller drops its own entries next"
