"""Individual acknowledgements per second on one cursor, and the memory they hold.

Acks 1,000,000 entries of one ledger in order (mark-delete follows each ack) and in a
shuffled order (acks pile up beyond mark-delete until the gaps close), with the cursor
of this checkout and, given ``--compare REV``, the cursor of an older commit (read with
``git show``), so the two print side by side.

    python bench/cursor_bench.py --entries 1000000 --compare 433189c
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.core.positions import BEFORE_START, Position  # noqa: E402
from magnetar.core.subscriptions.cursor import Cursor  # noqa: E402


def old_cursor_class(rev: str) -> Any:
    source = subprocess.run(["git", "show", f"{rev}:src/magnetar/core/subscriptions/cursor.py"], capture_output=True,
                            text=True, check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    path = Path(tempfile.mkdtemp()) / "old_cursor.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_cursor", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_cursor"] = module
    spec.loader.exec_module(module)
    return module.Cursor


def measure(cursor_class: Any, entries: int, order: list[int]) -> dict[str, float]:
    def next_position(pos: Position) -> Position:
        return Position(1, min(pos.entry_id + 1, entries)) if pos.ledger_id == 1 else Position(1, 0)

    cursor = cursor_class("s", BEFORE_START, next_position)
    peak_acked = peak_rss = 0
    base_rss = rss_bytes()
    started = time.perf_counter()
    for i, entry_id in enumerate(order):
        cursor.ack(Position(1, entry_id))
        if i % 4096 == 0:
            peak_acked = max(peak_acked, len(cursor.individually_deleted))
            peak_rss = max(peak_rss, rss_bytes() - base_rss)
    elapsed = time.perf_counter() - started
    assert cursor.mark_delete == Position(1, entries - 1)
    return {"acks_per_s": round(entries / elapsed), "peak_rss_growth_mb": round(peak_rss / 1e6, 1),
            "peak_acked_beyond_mark_delete": peak_acked}


def rss_bytes() -> int:
    """Resident memory now (C allocations included, which tracemalloc would not see)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--compare", help="also measure the cursor of this git revision")
    args = parser.parse_args()
    in_order = list(range(args.entries))
    shuffled = in_order[:]
    random.Random(1).shuffle(shuffled)
    classes = {"current": Cursor}
    if args.compare:
        classes[args.compare] = old_cursor_class(args.compare)
    for name, cursor_class in classes.items():
        for label, order in (("in_order", in_order), ("shuffled", shuffled)):
            print(json.dumps({"cursor": name, "order": label, "entries": args.entries,
                              **measure(cursor_class, args.entries, order)}), flush=True)


if __name__ == "__main__":
    main()
