"""Index files of complete ledgers: opening a topic loads them instead of scanning every record."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage import SegmentLedger, segment_ledger
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.segment_ledger import index_file_name, segment_file_name, topic_dir_name

TOPIC = "persistent://public/default/indexed"
CONFIG = LedgerConfig(max_entries_per_ledger=4)


def write(data_dir: Path, count: int, ids: itertools.count[int]) -> SegmentLedger:
    """Append ``count`` entries, syncing each (as the group commit does), and leave it open (a crash)."""
    ledger = SegmentLedger(data_dir, TOPIC, ids.__next__, CONFIG)
    for i in range(count):
        ledger.append(f"entry-{i}".encode())
        ledger.flush()
        ledger.sync()
    return ledger


def entries(ledger: SegmentLedger) -> list[bytes]:
    out = []
    for info in ledger.ledgers():
        out += [ledger.read(Position(info.ledger_id, i)) for i in range(info.entries)]
    return out


def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    scanned: list[int] = []
    scan = segment_ledger.recover_segment

    def counting(path: Path, ledger_id: int) -> segment_ledger.SegmentScan | None:
        scanned.append(ledger_id)
        return scan(path, ledger_id)

    monkeypatch.setattr(segment_ledger, "recover_segment", counting)
    return scanned


def test_complete_ledgers_are_loaded_from_their_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = itertools.count(1)
    write(tmp_path, 10, ids)
    topic_dir = tmp_path / topic_dir_name(TOPIC)
    assert sorted(p.name for p in topic_dir.glob("*.idx")) == [index_file_name(1), index_file_name(2)]
    scanned = scans(monkeypatch)
    reopened = SegmentLedger(tmp_path, TOPIC, ids.__next__, CONFIG)
    assert scanned == [3], "only the ledger being written at the crash is scanned"
    assert entries(reopened) == [f"entry-{i}".encode() for i in range(10)]
    scanned.clear()
    again = SegmentLedger(tmp_path, TOPIC, ids.__next__, CONFIG)
    # ledger 3 got its index at the first open; 4 is the empty ledger that open started
    assert scanned == [4]
    assert entries(again) == [f"entry-{i}".encode() for i in range(10)]


@pytest.mark.parametrize("damage", ["truncated index", "flipped index byte", "segment cut short",
                                    "segment grown", "index of another ledger"])
def test_an_index_that_does_not_match_its_file_means_a_scan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    ids = itertools.count(1)
    write(tmp_path, 10, ids)
    topic_dir = tmp_path / topic_dir_name(TOPIC)
    index, segment = topic_dir / index_file_name(1), topic_dir / segment_file_name(1)
    if damage == "truncated index":
        index.write_bytes(index.read_bytes()[:-3])
    elif damage == "flipped index byte":
        raw = bytearray(index.read_bytes())
        raw[-1] ^= 0xFF
        index.write_bytes(bytes(raw))
    elif damage == "segment cut short":
        segment.write_bytes(segment.read_bytes()[:-2])
    elif damage == "segment grown":
        segment.write_bytes(segment.read_bytes() + b"\0" * 16)
    else:
        index.write_bytes((topic_dir / index_file_name(2)).read_bytes())
    scanned = scans(monkeypatch)
    reopened = SegmentLedger(tmp_path, TOPIC, ids.__next__, CONFIG)
    assert 1 in scanned
    got = entries(reopened)
    expected = [f"entry-{i}".encode() for i in range(10)]
    if damage == "segment cut short":
        expected.remove(b"entry-3")  # the torn last record of ledger 1 is cut off
    assert got == expected


def test_trimming_a_ledger_removes_its_index(tmp_path: Path) -> None:
    ids = itertools.count(1)
    ledger = write(tmp_path, 10, ids)
    assert ledger.trim_before(Position(3, 0)) == [1, 2]
    topic_dir = tmp_path / topic_dir_name(TOPIC)
    assert list(topic_dir.glob("*.idx")) == []


def test_an_index_left_without_its_ledger_is_removed_at_open(tmp_path: Path) -> None:
    ids = itertools.count(1)
    write(tmp_path, 10, ids)
    topic_dir = tmp_path / topic_dir_name(TOPIC)
    (topic_dir / segment_file_name(1)).unlink()
    SegmentLedger(tmp_path, TOPIC, ids.__next__, CONFIG)
    assert not (topic_dir / index_file_name(1)).exists()
