"""Group commit: one fsync round covers every append pending when it starts."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import pytest

from magnetar.core.positions import Position
from magnetar.storage import GroupCommitter, SegmentLedger
from magnetar.storage.group_commit import SyncedBatch
from magnetar.storage.interfaces import LedgerConfig, ManagedLedger, StorageError

from .conftest import MakeFactory

TOPIC = "persistent://public/default/group"
WAIT_S = 10


class Recorder:
    """Collects callback batches and lets a test wait for a ledger to reach a position."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, Position]]] = []
        self.errors: list[tuple[str, Exception]] = []
        self.threads: set[str] = set()
        self._cond = threading.Condition()

    def on_synced(self, batch: SyncedBatch) -> None:
        with self._cond:
            self.threads.add(threading.current_thread().name)
            self.batches.append([(ledger.name, pos) for ledger, pos in batch])
            self._cond.notify_all()

    def on_error(self, ledger: ManagedLedger, exc: Exception) -> None:
        with self._cond:
            self.errors.append((ledger.name, exc))
            self._cond.notify_all()

    def reported(self, name: str) -> list[Position]:
        return [pos for batch in self.batches for ledger_name, pos in batch if ledger_name == name]

    def wait_for(self, name: str, pos: Position) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: pos in self.reported(name), WAIT_S), (name, pos)


def test_one_round_covers_every_append_pending_when_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entered, gate = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def gated_fdatasync(fd: int) -> None:
        if not entered.is_set():  # hold the first round inside its fsync
            entered.set()
            assert gate.wait(WAIT_S)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)
    ledger = SegmentLedger(tmp_path, TOPIC, itertools.count(1).__next__)
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced) as committer:
        first = ledger.append(b"first")
        committer.mark_dirty(ledger)
        assert entered.wait(WAIT_S)
        later = []
        for i in range(100):
            later.append(ledger.append(b"later-%d" % i))
            committer.mark_dirty(ledger)
        gate.set()
        recorder.wait_for(TOPIC, later[-1])
    assert recorder.batches == [[(TOPIC, first)], [(TOPIC, later[-1])]]
    assert committer.rounds == 2
    assert ledger.sync_count == 2
    # Round 1: the new file, its directory and the new directory's entry in its parent
    # (opening the ledger synced nothing); round 2: one fdatasync for 100 appends.
    assert ledger.fsync_count == 4
    assert recorder.threads == {"magnetar-group-commit"}
    ledger.close()


def test_opening_a_new_ledger_syncs_nothing_and_its_first_sync_makes_its_directory_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening runs on the event loop: the new directory's entry in its parent is made
    durable by the first sync, which runs on the committer's thread."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recorded_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "fdatasync", recorded_fsync)
    ledger = SegmentLedger(tmp_path, TOPIC, itertools.count(1).__next__)
    assert synced == [] and ledger.unsynced()
    ledger.sync()
    assert str(ledger.directory.parent) in synced and str(ledger.directory) in synced
    synced.clear()
    ledger.close()
    reopened = SegmentLedger(tmp_path, TOPIC, itertools.count(2).__next__)  # the directory exists now
    reopened.sync()
    assert str(ledger.directory.parent) not in synced
    reopened.close()


def test_many_ledgers_reported_in_order_up_to_their_last_append(make_factory: MakeFactory) -> None:
    factory = make_factory(LedgerConfig(max_entries_per_ledger=7))
    ledgers = [factory.open(f"{TOPIC}-{i}") for i in range(5)]
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced) as committer:
        for i in range(500):
            ledger = ledgers[(i * 7) % 5]
            ledger.append(b"m%d" % i)
            committer.mark_dirty(ledger)
    # stop() drained everything marked before it.
    for ledger in ledgers:
        reported = recorder.reported(ledger.name)
        assert reported == sorted(set(reported))
        assert reported[-1] == ledger.last_position()
        assert not ledger.unsynced()
        ledger.close()


def test_syncs_while_the_owner_rolls_over_and_trims(tmp_path: Path) -> None:
    """Descriptors closed by rollover or trim on the owner thread never break a sync."""
    ledger = SegmentLedger(tmp_path, TOPIC, itertools.count(1).__next__, LedgerConfig(max_entries_per_ledger=3))
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced, on_error=recorder.on_error) as committer:
        for i in range(600):
            pos = ledger.append(b"x%d" % i)
            committer.mark_dirty(ledger)
            if i % 20 == 0:
                ledger.trim_before(pos)
    assert recorder.errors == []
    assert recorder.reported(TOPIC)[-1] == ledger.last_position()
    assert not ledger.unsynced()
    ledger.close()


def test_sync_disabled_reports_in_order_without_fsync(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced, sync_enabled=False) as committer:
        positions = []
        for i in range(50):
            positions.append(ledger.append(b"m%d" % i))
            committer.mark_dirty(ledger)
        recorder.wait_for(TOPIC, positions[-1])
    reported = recorder.reported(TOPIC)
    assert reported == sorted(set(reported))
    assert reported[-1] == positions[-1]
    assert ledger.unsynced()
    assert ledger.sync_count == 0  # type: ignore[attr-defined]


class FailingLedger(SegmentLedger):
    def sync(self) -> Position | None:
        raise StorageError("disk on fire")


def test_a_failing_ledger_is_reported_and_the_others_carry_on(tmp_path: Path) -> None:
    ids = itertools.count(1).__next__
    bad = FailingLedger(tmp_path, TOPIC + "-bad", ids)
    good = SegmentLedger(tmp_path, TOPIC + "-good", ids)
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced, on_error=recorder.on_error) as committer:
        bad.append(b"1")
        committer.mark_dirty(bad)
        pos = good.append(b"1")
        committer.mark_dirty(good)
        recorder.wait_for(good.name, pos)
    assert [(name, str(exc)) for name, exc in recorder.errors] == [(bad.name, "disk on fire")]
    assert recorder.reported(bad.name) == []


def test_a_failing_callback_does_not_stop_the_worker(tmp_path: Path) -> None:
    ledger = SegmentLedger(tmp_path, TOPIC, itertools.count(1).__next__)
    recorder = Recorder()
    failed = threading.Event()

    def flaky(batch: SyncedBatch) -> None:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("callback bug")
        recorder.on_synced(batch)

    with GroupCommitter(flaky) as committer:
        ledger.append(b"1")
        committer.mark_dirty(ledger)
        assert failed.wait(WAIT_S)
        pos = ledger.append(b"2")
        committer.mark_dirty(ledger)
        recorder.wait_for(TOPIC, pos)
    ledger.close()


def test_mark_dirty_after_stop_is_refused(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    committer = GroupCommitter(lambda batch: None)
    committer.start()
    committer.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        committer.mark_dirty(ledger)
    with pytest.raises(RuntimeError, match="already started"):
        committer.start()


def test_flush_waits_for_everything_marked_before_it(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    recorder = Recorder()
    with GroupCommitter(recorder.on_synced) as committer:
        assert committer.flush(WAIT_S)  # nothing marked: returns at once
        for i in range(20):
            pos = ledger.append(b"m%d" % i)
            committer.mark_dirty(ledger)
            if i % 7 == 0:
                assert committer.flush(WAIT_S)
                assert recorder.reported(TOPIC)[-1] == pos
                assert not ledger.unsynced()


def test_flush_times_out_when_the_worker_is_not_running(make_factory: MakeFactory) -> None:
    ledger = make_factory().open(TOPIC)
    committer = GroupCommitter(lambda batch: None)
    ledger.append(b"1")
    committer.mark_dirty(ledger)
    assert not committer.flush(0.01)
