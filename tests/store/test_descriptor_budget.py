"""Open files bounded by the budget, not by the number of ledgers, on real files."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

from magnetar.core.positions import Position
from magnetar.storage.descriptor_budget import DescriptorBudget
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_ledgers_hold_no_more_files_than_the_budget(tmp_path: Path) -> None:
    budget = DescriptorBudget(max_holders=10)
    ids = itertools.count(1)
    factory = SegmentLedgerFactory(tmp_path, ids.__next__, budget=budget)
    before = open_fds()
    ledgers = [factory.open(f"persistent://t/n/topic-{i}") for i in range(200)]
    for round_ in range(3):
        for i, ledger in enumerate(ledgers):
            ledger.append(f"{i}-{round_}".encode())
            ledger.flush()
            ledger.sync()
    assert len(budget) <= 10 and budget.evictions >= 190
    assert open_fds() - before <= 10 * 2, "one write and at most one read descriptor for each ledger in the budget"
    for i, ledger in enumerate(ledgers):  # every ledger reads and writes after giving its files back
        assert [ledger.read(Position(ledger.first_position().ledger_id, e)) for e in range(3)] == \
            [f"{i}-{r}".encode() for r in range(3)]  # type: ignore[union-attr]
        ledger.append(b"more")
        ledger.flush()
    for ledger in ledgers:
        ledger.close()
    # at most as many as before: the count is the process's, and under two workers an earlier
    # test's background thread may close a socket of its own meanwhile
    assert open_fds() <= before, "closing the ledgers gave every descriptor back"


def test_a_ledger_with_unwritten_appends_keeps_its_descriptor(tmp_path: Path) -> None:
    budget = DescriptorBudget(max_holders=1)
    ids = itertools.count(1)
    busy = SegmentLedger(tmp_path, "persistent://t/n/busy", ids.__next__, budget=budget)
    busy.append(b"buffered")
    other = SegmentLedger(tmp_path, "persistent://t/n/other", ids.__next__, budget=budget)
    other.append(b"x")
    other.flush()
    assert budget.evictions == 0, "the busy ledger was passed over"
    busy.flush()
    busy.sync()
    assert busy.read(busy.last_position()) == b"buffered"  # type: ignore[arg-type]
    busy.close()
    other.close()


def test_only_the_owning_thread_takes_descriptors_back(tmp_path: Path) -> None:
    budget = DescriptorBudget(max_holders=1)
    ids = itertools.count(1)
    first = SegmentLedger(tmp_path, "persistent://t/n/a", ids.__next__, budget=budget)
    made: list[SegmentLedger] = []
    thread = threading.Thread(target=lambda: made.append(
        SegmentLedger(tmp_path, "persistent://t/n/b", ids.__next__, budget=budget)))
    thread.start()
    thread.join()
    assert budget.evictions == 0 and len(budget) == 2, "another thread only registers"
    third = SegmentLedger(tmp_path, "persistent://t/n/c", ids.__next__, budget=budget)
    assert budget.evictions == 2 and len(budget) == 1
    for ledger in (first, made[0], third):
        ledger.close()
