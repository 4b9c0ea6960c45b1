"""Buffered appends: one write per flush, and a failed write taken back whole.

The failure is a real one: the process's file-size limit (``RLIMIT_FSIZE``, what a full
disk looks like to a writer: the write stops short or fails with EFBIG).
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage import SegmentLedger
from magnetar.storage.interfaces import AppendFailed
from magnetar.storage.segment_ledger import segment_file_name, topic_dir_name

TOPIC = "persistent://public/default/batching"


def open_ledger(data_dir: Path, first_id: int = 1) -> SegmentLedger:
    return SegmentLedger(data_dir, TOPIC, itertools.count(first_id).__next__)


@contextmanager
def file_size_limit(limit_bytes: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_appends_are_readable_before_the_flush_and_written_by_it(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    segment = tmp_path / topic_dir_name(TOPIC) / segment_file_name(1)
    before = segment.stat().st_size
    positions = [ledger.append(f"entry-{i}".encode()) for i in range(100)]
    assert segment.stat().st_size == before  # nothing written yet
    assert ledger.read(positions[42]) == b"entry-42"
    assert ledger.sync() is None  # what is not written cannot be durable
    ledger.flush()
    assert segment.stat().st_size > before
    assert ledger.sync() == positions[-1]
    ledger.close()
    reopened = open_ledger(tmp_path, 10)
    assert [reopened.read(p) for p in positions] == [f"entry-{i}".encode() for i in range(100)]
    reopened.close()


def test_a_failed_write_takes_back_every_buffered_entry_and_leaves_no_hole(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    kept = ledger.append(b"kept")
    ledger.flush()
    assert ledger.sync() == kept
    segment = tmp_path / topic_dir_name(TOPIC) / segment_file_name(1)
    size = segment.stat().st_size
    lost = [ledger.append(b"x" * 1000) for _ in range(5)]
    with file_size_limit(size + 2500), pytest.raises(AppendFailed) as failed:
        ledger.flush()
    assert failed.value.position == lost[0]
    assert segment.stat().st_size == size  # the partial write was cut off
    assert ledger.last_position() == kept
    with pytest.raises(KeyError):
        ledger.read(lost[0])
    # space again: the next append lands where the first lost one was
    again = ledger.append(b"again")
    assert again == lost[0]
    ledger.flush()
    assert ledger.sync() == again
    ledger.close()
    reopened = open_ledger(tmp_path, 10)
    assert [reopened.read(p) for p in (kept, again)] == [b"kept", b"again"]
    assert reopened.last_position() == again
    reopened.close()


def test_a_full_buffer_is_written_without_waiting_for_the_flush(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    segment = tmp_path / topic_dir_name(TOPIC) / segment_file_name(1)
    before = segment.stat().st_size
    for _ in range(300):
        ledger.append(b"y" * 10_000)  # 3 MB: over the 1 MiB buffer
    assert segment.stat().st_size - before >= 1 << 20
    ledger.close()


def test_a_failed_automatic_write_refuses_the_append_that_caused_it(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    segment = tmp_path / topic_dir_name(TOPIC) / segment_file_name(1)
    size = segment.stat().st_size
    first = ledger.append(b"z" * (1 << 20))
    with file_size_limit(size + 1000), pytest.raises(AppendFailed) as failed:
        ledger.append(b"next")
    assert failed.value.position == first
    assert ledger.last_position() is None
    assert ledger.append(b"next") == Position(1, 0)
    ledger.close()
    assert os.path.getsize(segment) > size
