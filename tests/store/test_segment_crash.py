"""Kill -9 a process in the middle of appending with group commit; nothing reported synced is lost."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from magnetar.core.positions import Position
from magnetar.storage import MetadataStore, SegmentLedger
from magnetar.storage.interfaces import LedgerConfig

TOPIC = "persistent://public/default/crash"
MAX_ENTRIES = 500

# The child appends without pause; the group-commit worker prints each durable position.
CHILD = f"""
import sys
from magnetar.storage import GroupCommitter, MetadataStore, SegmentLedger
from magnetar.storage.interfaces import LedgerConfig

data_dir = sys.argv[1]
store = MetadataStore(data_dir + "/metadata.db")
config = LedgerConfig(max_entries_per_ledger={MAX_ENTRIES})
ledger = SegmentLedger(data_dir, {TOPIC!r}, store.next_ledger_id, config)

def report(batch):
    for _, pos in batch:
        sys.stdout.write(f"{{pos.ledger_id}} {{pos.entry_id}}\\n")
    sys.stdout.flush()

committer = GroupCommitter(report)
committer.start()
i = 0
while True:
    ledger.append(f"entry-{{i}}|".encode() * (1 + i % 9))
    committer.mark_dirty(ledger)
    i += 1
"""


def payload(i: int) -> bytes:
    return f"entry-{i}|".encode() * (1 + i % 9)


def read_reports(proc: subprocess.Popen[bytes], wanted: int, timeout_s: float) -> list[Position]:
    assert proc.stdout is not None
    reports: list[Position] = []
    buffer = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while len(reports) < wanted:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"only {len(reports)} sync reports before the deadline"
            if not selector.select(remaining):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"child exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''!r}"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            reports.extend(Position(*map(int, line.split())) for line in lines)
    return reports


def test_every_entry_reported_synced_survives_sigkill(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        reports = read_reports(proc, wanted=200, timeout_s=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert reports == sorted(reports)

    store = MetadataStore(tmp_path / "metadata.db")
    ledger = SegmentLedger(tmp_path, TOPIC, store.next_ledger_id, LedgerConfig(max_entries_per_ledger=MAX_ENTRIES))
    recovered: list[Position] = []
    pos = ledger.first_position()
    end = ledger.next_position(ledger.last_position() or Position(-1, -1))
    while pos is not None and pos != end:
        assert ledger.read(pos) == payload(len(recovered)), pos
        recovered.append(pos)
        pos = ledger.next_position(pos)
    # Entries are contiguous from the first, so every reported position being present
    # means no synced entry before it was lost either.
    assert set(reports) <= set(recovered)
    # The ledger id counter never went back: the new current ledger is beyond every old one.
    assert ledger.ledgers()[-1].ledger_id > recovered[-1].ledger_id
    ledger.close()
    store.close()
