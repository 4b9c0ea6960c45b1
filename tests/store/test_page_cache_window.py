"""Synced segment data far behind a ledger's end leaves the OS page cache (a hint to the
kernel, ``journalRemoveFromPageCache``), and everything still reads back, on real files."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage import segment_ledger
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.segment_ledger import SegmentLedger

ENTRY = 100_000
WINDOW = 1_000_000
STEP = 300_000


@pytest.fixture
def hints(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(offset, length) of every range the ledger gave up."""
    given: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        given.append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    monkeypatch.setattr(segment_ledger, "_PAGE_CACHE_STEP_BYTES", STEP)
    return given


def ledger(tmp_path: Path, window: int | None) -> SegmentLedger:
    config = LedgerConfig(page_cache_window_bytes=window, cache_max_entries=0, cache_max_bytes=0)
    return SegmentLedger(tmp_path, "persistent://t/n/window", itertools.count(1).__next__, config)


def publish(target: SegmentLedger, count: int, first: int) -> list[Position]:
    positions = [target.append(f"{first + n}:".encode().ljust(ENTRY, b"=")) for n in range(count)]
    target.flush()
    target.sync()
    return positions


def test_synced_data_behind_the_window_is_given_up_in_steps(tmp_path: Path, hints: list[tuple[int, int]]) -> None:
    target = ledger(tmp_path, WINDOW)
    positions = publish(target, 5, 0)
    assert hints == [], "500 KB written: nothing is behind the window"
    positions += publish(target, 10, 5)
    end = target.total_size_bytes()
    assert hints == [(0, hints[0][1])] and end - WINDOW - hints[0][1] < 1000, (hints, end)
    positions += publish(target, 2, 15)
    assert len(hints) == 1, "200 KB more is less than a step"
    positions += publish(target, 10, 17)
    assert hints[1][0] == sum(hints[0]), "the next range starts where the last one stopped"
    assert [target.read(p)[:3] for p in positions[:3]] == [b"0:=", b"1:=", b"2:="]
    assert all(target.read(p).startswith(f"{n}:".encode()) for n, p in enumerate(positions))
    target.close()


def test_no_window_gives_nothing_up(tmp_path: Path, hints: list[tuple[int, int]]) -> None:
    target = ledger(tmp_path, None)
    publish(target, 30, 0)
    assert hints == []
    target.close()


def test_a_refused_hint_does_not_fail_the_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refusing(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refusing)
    monkeypatch.setattr(segment_ledger, "_PAGE_CACHE_STEP_BYTES", STEP)
    target = ledger(tmp_path, WINDOW)
    positions = publish(target, 30, 0)
    assert target.sync() == positions[-1]
    assert target.read(positions[0]).startswith(b"0:")
    target.close()


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="page_cache_window_bytes"):
        LedgerConfig(page_cache_window_bytes=-1)
