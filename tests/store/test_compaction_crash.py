"""A process killed in the middle of a compaction leaves the old or the new compacted view
whole, never a mix, and the file no cursor names is removed at the next load.

The child runs the broker's order of steps on real files: write the new view (fsync,
rename), write the ``__compaction`` cursor naming it, delete the previous view. It is
killed with SIGKILL at a chosen step (in the middle of writing the view, after the view
but before the cursor, after the cursor but before the old view is deleted).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.core.compaction.compacted_topic import COMPACTED_TOPIC_LEDGER_PROPERTY, COMPACTION_SUBSCRIPTION
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage import MetadataStore
from magnetar.storage.compacted_ledger import CompactedLedgerStorage
from magnetar.storage.interfaces import LedgerCorruption

TOPIC = "persistent://public/default/crash-compaction"

CHILD = f"""
import os, signal, sys
from pathlib import Path
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.positions import Position
from magnetar.storage import MetadataStore
from magnetar.storage.compacted_ledger import CompactedLedgerStorage

data, step, old_id, new_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = MetadataStore(Path(data) / "metadata.db")
views = CompactedLedgerStorage(Path(data) / "compacted")

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def entries():
    for i in range(2000):
        if step == "writing" and i == 1000:
            die()
        yield Position(9, i), b"new-%d" % i

views.write({TOPIC!r}, new_id, entries())
if step == "before-cursor":
    die()
store.put_cursor({TOPIC!r}, {COMPACTION_SUBSCRIPTION!r}, CursorRecord(
    mark_delete=Position(9, 1999), individually_deleted=[], properties={{{COMPACTED_TOPIC_LEDGER_PROPERTY!r}: new_id}},
    last_active_ms=0))
if step == "before-delete":
    die()
views.delete({TOPIC!r}, old_id)
"""


def old_view(data: Path, store: MetadataStore) -> int:
    views = CompactedLedgerStorage(data / "compacted")
    views.write(TOPIC, 5, ((Position(3, i), b"old-%d" % i) for i in range(100)))
    store.put_cursor(TOPIC, COMPACTION_SUBSCRIPTION, CursorRecord(
        mark_delete=Position(3, 99), individually_deleted=[], properties={COMPACTED_TOPIC_LEDGER_PROPERTY: 5},
        last_active_ms=0))
    return 5


@pytest.mark.parametrize(("step", "survivor"), [("writing", "old"), ("before-cursor", "old"),
                                                ("before-delete", "new"), ("done", "new")])
def test_a_crash_at_any_step_leaves_one_whole_view_named(tmp_path: Path, step: str, survivor: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = MetadataStore(data / "metadata.db")
    old_id = old_view(data, store)
    store.close()
    child = subprocess.run([sys.executable, "-c", CHILD, str(data), step, str(old_id), "8"], timeout=60,
                           capture_output=True)
    assert child.returncode == (0 if step == "done" else -signal.SIGKILL), child.stderr.decode()

    store = MetadataStore(data / "metadata.db")
    record = store.get_cursor(TOPIC, COMPACTION_SUBSCRIPTION)
    assert record is not None
    named = int(record.properties[COMPACTED_TOPIC_LEDGER_PROPERTY])
    views = CompactedLedgerStorage(data / "compacted")
    views.sweep(TOPIC, keep=named)  # what loading the topic does
    assert sorted(os.listdir(views.topic_dir(TOPIC))) == [f"{named:020d}.cmp"]
    view = views.open(TOPIC, named)
    entries = list(view.iter_entries())
    if survivor == "old":
        assert (named, record.mark_delete, len(entries)) == (5, Position(3, 99), 100)
        assert entries[-1] == (Position(3, 99), b"old-99")
    else:
        assert (named, record.mark_delete, len(entries)) == (8, Position(9, 1999), 2000)
        assert view.read(Position(9, 1234)) == b"new-1234"
    store.close()


def test_a_damaged_view_is_refused_not_served(tmp_path: Path) -> None:
    views = CompactedLedgerStorage(tmp_path)
    view = views.write(TOPIC, 1, ((Position(1, i), b"x" * 50) for i in range(10)))
    assert (len(view), view.first_after(Position(1, 3)), view.last_upto(Position(1, 100))) == (
        10, Position(1, 4), Position(1, 9))
    assert view.first_after(Position(1, 9)) is None and view.last_upto(Position(0, 5)) is None
    with pytest.raises(KeyError):
        view.read(Position(2, 0))
    raw = bytearray(view.path.read_bytes())
    raw[-5] ^= 0xFF
    view.path.write_bytes(bytes(raw))
    with pytest.raises(LedgerCorruption):
        views.open(TOPIC, 1)
    with pytest.raises(ValueError, match="out of order"):
        views.write(TOPIC, 2, [(Position(1, 2), b"a"), (Position(1, 1), b"b")])
