"""Segment files on disk: torn and corrupt tails, damaged headers, the tail cache."""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.positions import Position
from magnetar.storage import SegmentLedger, segment_ledger
from magnetar.storage.interfaces import LedgerConfig, LedgerCorruption
from magnetar.storage.segment_ledger import HEADER, RECORD, segment_file_name, topic_dir_name

TOPIC = "persistent://public/default/recovery"
ENTRIES = [b"a", b"bb" * 7, b"ccc" * 20, b"d" * 33, b"e" * 5]


def write_ledger(data_dir: Path, entries: list[bytes]) -> tuple[Path, list[int]]:
    """Write entries into ledger 1 and close; return its file and each record's end offset."""
    ledger = SegmentLedger(data_dir, TOPIC, itertools.count(1).__next__)
    for entry in entries:
        ledger.append(entry)
    ledger.close()
    ends = list(itertools.accumulate((RECORD.size + len(e) for e in entries), initial=HEADER.size))[1:]
    return data_dir / topic_dir_name(TOPIC) / segment_file_name(1), ends


def reopen(data_dir: Path) -> SegmentLedger:
    return SegmentLedger(data_dir, TOPIC, itertools.count(100).__next__)


def surviving(ledger: SegmentLedger) -> list[bytes]:
    """Entries of ledger 1 still readable after recovery."""
    infos = {info.ledger_id: info.entries for info in ledger.ledgers()}
    return [ledger.read(Position(1, i)) for i in range(infos.get(1, 0))]


@pytest.fixture
def original(tmp_path: Path) -> tuple[bytes, list[int]]:
    path, ends = write_ledger(tmp_path / "original", ENTRIES)
    return path.read_bytes(), ends


def install(data_dir: Path, content: bytes) -> Path:
    """Put a ledger-1 segment file with this content into a fresh topic directory."""
    topic_dir = data_dir / topic_dir_name(TOPIC)
    topic_dir.mkdir(parents=True)
    path = topic_dir / segment_file_name(1)
    path.write_bytes(content)
    return path


def test_truncation_at_every_offset_keeps_exactly_the_whole_records(
    tmp_path: Path, original: tuple[bytes, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    content, ends = original
    for cut in range(HEADER.size, len(content) + 1):
        data_dir = tmp_path / f"cut{cut}"
        path = install(data_dir, content[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
            ledger = reopen(data_dir)
        whole = sum(1 for end in ends if end <= cut)
        assert surviving(ledger) == ENTRIES[:whole], cut
        boundary = HEADER.size if whole == 0 else ends[whole - 1]
        torn = cut != boundary
        assert bool(caplog.records) == torn, cut
        if whole:
            assert path.stat().st_size == boundary, cut
        else:
            assert not path.exists(), cut
        ledger.close()


def test_a_flipped_byte_keeps_the_records_before_it(
    tmp_path: Path, original: tuple[bytes, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    content, ends = original
    for offset in range(HEADER.size, len(content)):
        damaged = bytearray(content)
        damaged[offset] ^= 0x41
        data_dir = tmp_path / f"flip{offset}"
        install(data_dir, bytes(damaged))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
            ledger = reopen(data_dir)
        good = sum(1 for end in ends if end <= offset)
        assert surviving(ledger) == ENTRIES[:good], offset
        assert caplog.records, offset
        # Damage with intact records after it is reported louder than a torn tail (unless
        # the length field itself was hit, which hides where the next record starts).
        record_start = ends[good - 1] if good else HEADER.size
        if offset - record_start >= 4:
            expected_level = logging.ERROR if good < len(ENTRIES) - 1 else logging.WARNING
            assert caplog.records[-1].levelno == expected_level, offset
        ledger.close()


def test_zero_filled_tail_is_cut_off(tmp_path: Path, original: tuple[bytes, list[int]]) -> None:
    content, ends = original
    install(tmp_path, content + bytes(4096))
    ledger = reopen(tmp_path)
    assert surviving(ledger) == ENTRIES


@settings(max_examples=40, deadline=None)
@given(
    entries=st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=12),
    cut_fraction=st.floats(0, 1),
)
def test_random_ledgers_cut_anywhere_recover_their_whole_records(entries: list[bytes], cut_fraction: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, ends = write_ledger(Path(tmp), entries)
        cut = HEADER.size + int((ends[-1] - HEADER.size) * cut_fraction)
        os.truncate(path, cut)
        ledger = reopen(Path(tmp))
        assert surviving(ledger) == entries[: sum(1 for end in ends if end <= cut)]
        ledger.close()


def test_positions_past_a_recovered_tail_are_never_reused(tmp_path: Path, original: tuple[bytes, list[int]]) -> None:
    content, ends = original
    install(tmp_path, content[: ends[2] + 3])  # entries 0..2 survive; 1:3 and 1:4 are gone
    ledger = reopen(tmp_path)
    assert ledger.last_position() == Position(1, 2)
    new = ledger.append(b"new")
    assert new == Position(100, 0)
    # A cursor that had seen 1:4 before the crash moves on to the new ledger.
    assert ledger.next_position(Position(1, 4)) == new
    assert ledger.read(Position(1, 2)) == ENTRIES[2]


def test_torn_header_drops_the_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = install(tmp_path, b"MGSG\x00")
    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        ledger = reopen(tmp_path)
    assert not path.exists()
    assert [info.ledger_id for info in ledger.ledgers()] == [100]
    assert "header is incomplete" in caplog.text


def test_zero_filled_file_is_dropped(tmp_path: Path) -> None:
    path = install(tmp_path, bytes(HEADER.size + 100))
    ledger = reopen(tmp_path)
    assert not path.exists()
    assert ledger.first_position() is None


def test_wrong_header_fails_loudly(tmp_path: Path, original: tuple[bytes, list[int]]) -> None:
    content, _ = original
    install(tmp_path, b"XXXX" + content[4:])
    with pytest.raises(LedgerCorruption, match="move it aside"):
        reopen(tmp_path)


def test_header_of_another_ledger_fails_loudly(tmp_path: Path, original: tuple[bytes, list[int]]) -> None:
    content, _ = original
    topic_dir = tmp_path / topic_dir_name(TOPIC)
    topic_dir.mkdir()
    (topic_dir / segment_file_name(7)).write_bytes(content)  # header says ledger 1
    with pytest.raises(LedgerCorruption, match="ledger 7"):
        reopen(tmp_path)


def test_damage_found_at_read_time_fails_only_that_entry(tmp_path: Path) -> None:
    path, ends = write_ledger(tmp_path, ENTRIES)
    ledger = reopen(tmp_path)
    with open(path, "r+b") as f:
        f.seek(ends[1] + RECORD.size)  # first data byte of entry 2
        f.write(b"X")
    with pytest.raises(LedgerCorruption, match="checksum"):
        ledger.read(Position(1, 2))
    assert ledger.read(Position(1, 3)) == ENTRIES[3]


def test_damage_found_by_a_scan_fails_at_that_entry(tmp_path: Path) -> None:
    path, ends = write_ledger(tmp_path, ENTRIES)
    ledger = reopen(tmp_path)
    with open(path, "r+b") as f:
        f.seek(ends[1] + RECORD.size)  # first data byte of entry 2
        f.write(b"X")
    scan = ledger.iter_entries(Position(-1, -1))
    assert [next(scan), next(scan)] == [(Position(1, 0), ENTRIES[0]), (Position(1, 1), ENTRIES[1])]
    with pytest.raises(LedgerCorruption, match="entry 1:2 .* checksum"):
        next(scan)


@pytest.mark.parametrize("block_bytes", [1, 20, 64, 1 << 20])
def test_block_reads_at_open_and_in_scans_cut_records_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    """Opening a topic and scanning it read files in blocks; records may be larger than a block."""
    monkeypatch.setattr(segment_ledger, "_SCAN_BLOCK_BYTES", block_bytes)
    path, ends = write_ledger(tmp_path, ENTRIES)
    with open(path, "ab") as f:
        f.write(RECORD.pack(100, 0) + b"torn")  # a record cut short by a crash
    ledger = reopen(tmp_path)
    assert surviving(ledger) == ENTRIES
    assert [data for _, data in ledger.iter_entries(Position(-1, -1))] == ENTRIES
    assert [data for _, data in ledger.iter_entries(Position(1, 2))] == ENTRIES[3:]
    assert path.stat().st_size == ends[-1]


def test_tailing_reads_come_from_the_cache(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    config = LedgerConfig(cache_max_entries=3)
    ledger = SegmentLedger(tmp_path, TOPIC, itertools.count(1).__next__, config)
    positions = [ledger.append(entry) for entry in ENTRIES]
    disk_reads: list[int] = request.getfixturevalue("disk_reads")  # counted from here on
    assert [ledger.read(p) for p in positions[2:]] == ENTRIES[2:]
    assert disk_reads == []
    assert ledger.read(positions[0]) == ENTRIES[0]
    assert len(disk_reads) == 1


def test_topic_dir_names_are_safe_and_distinct() -> None:
    names = [
        "persistent://public/default/t",
        "persistent://public/default/T",
        "persistent://public/default/t.",
        "..",
        "a/b",
        "a%2Fb",
        "persistent://p/d/" + "x" * 500,
        "persistent://p/d/" + "x" * 499 + "y",
        "persistent://p/d/ünïcode",
    ]
    dir_names = [topic_dir_name(name) for name in names]
    assert len(set(dir_names)) == len(names)
    for dir_name in dir_names:
        assert "/" not in dir_name and dir_name not in (".", "..") and len(dir_name.encode()) <= 255
    with pytest.raises(ValueError):
        topic_dir_name("")
