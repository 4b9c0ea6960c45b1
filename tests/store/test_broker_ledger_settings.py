"""The broker's ledger settings take effect on the ledgers it opens, on real files:
``managedLedgerCacheSizeMB=0`` caches nothing, and ``journalRemoveFromPageCache`` decides
whether synced data far behind a ledger's end is given up from the page cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.server.broker_service import BrokerService
from magnetar.storage.segment_ledger import SegmentLedger

MB = 1024 * 1024


def ledger_of(tmp_path: Path, **settings: object) -> tuple[BrokerService, SegmentLedger]:
    broker = BrokerService(BrokerConfig(**settings), tmp_path / "data")  # type: ignore[arg-type]
    return broker, broker.ledger_factory.open("persistent://public/default/settings")


def test_a_cache_of_nothing_sends_every_read_to_the_file(tmp_path: Path, disk_reads: list[int]) -> None:
    for size_mb, reads_from_file in ((None, 0), (0, 5)):
        broker, ledger = ledger_of(tmp_path / str(size_mb), managedLedgerCacheSizeMB=size_mb)
        positions = [ledger.append(b"entry %d" % n) for n in range(5)]
        ledger.flush()
        disk_reads.clear()
        assert [ledger.read(p) for p in positions] == [b"entry %d" % n for n in range(5)]
        assert len(disk_reads) == reads_from_file, size_mb
        ledger.close()
        broker.metadata.close()


@pytest.mark.parametrize(("remove", "gives_up"), [(True, True), (False, False)])
def test_synced_data_far_behind_leaves_the_page_cache_as_configured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remove: bool, gives_up: bool) -> None:
    given: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        given.append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    broker, ledger = ledger_of(tmp_path, journalRemoveFromPageCache=remove)
    chunk = b"p" * MB
    for _ in range(280):  # past the 256 MB window and a 16 MB step
        ledger.append(chunk)
    ledger.flush()
    ledger.sync()
    assert bool(given) is gives_up, given
    if gives_up:
        assert given[0][0] == 0 and given[0][1] >= 16 * MB
    ledger.close()
    broker.metadata.close()
