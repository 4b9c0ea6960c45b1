"""Fixtures shared by the storage tests: one factory per ledger implementation."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar.storage import MemoryLedgerFactory, SegmentLedgerFactory
from magnetar.storage.interfaces import LedgerConfig, LedgerFactory

#: Builds a ledger factory for a config; ledger ids come from one counter per test, and
#: the clock is fixed so both implementations report identical ledger infos.
MakeFactory = Callable[..., LedgerFactory]

FIXED_CLOCK_MS = 1_700_000_000_000


@pytest.fixture(params=["memory", "segment"])
def make_factory(request: pytest.FixtureRequest, tmp_path: Path) -> MakeFactory:
    ids = itertools.count(1)

    def make(config: LedgerConfig | None = None) -> LedgerFactory:
        if request.param == "memory":
            return MemoryLedgerFactory(ids.__next__, config, clock_ms=lambda: FIXED_CLOCK_MS)
        return SegmentLedgerFactory(tmp_path / "data", ids.__next__, config, clock_ms=lambda: FIXED_CLOCK_MS)

    return make


@pytest.fixture
def disk_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The offsets of every ``os.pread`` from here on: reads that missed the tail cache."""
    reads: list[int] = []
    real = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        reads.append(offset)
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting)
    return reads
