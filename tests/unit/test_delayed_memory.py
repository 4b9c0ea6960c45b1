"""Memory per delayed index, 1,000,000 messages: bucket tracker vs in-memory tracker.

Messages sit in 20 ledgers of 50,000 entries with delivery times spread uniformly over one
hour; broker defaults otherwise (1 s tick, 50,000 indexes per bucket, 5,000 per segment).
Three figures per tracker: tracemalloc (Python's allocator only: roaring bitmaps allocate
outside it), resident-set growth measured in a fresh process (everything, minus the bytes
the memory snapshot storage holds, which a real broker keeps on disk), and the tracker's
own ``buffer_memory_bytes`` estimate.

Run with ``pytest -m slow -s tests/unit/test_delayed_memory.py``, or directly:
``python tests/unit/test_delayed_memory.py bucket 1000000``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tracemalloc

import pytest

from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.bucket_snapshot_storage import MemoryBucketSnapshotStorage
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.tracker import DelayedDeliveryTracker

COUNT = 1_000_000
ENTRIES_PER_LEDGER = 50_000
SPREAD_MS = 3_600_000


def delivery_times(count: int) -> list[int]:
    rng = random.Random(42)
    return [10_000 + rng.randrange(SPREAD_MS) for _ in range(count)]


def new_tracker(kind: str, storage: MemoryBucketSnapshotStorage) -> DelayedDeliveryTracker:
    if kind == "bucket":
        return BucketDelayedDeliveryTracker(storage)
    return InMemoryDelayedDeliveryTracker()


def fill(tracker: DelayedDeliveryTracker, times: list[int]) -> None:
    add = tracker.add_message
    for i, deliver_at in enumerate(times):
        add(1 + i // ENTRIES_PER_LEDGER, i % ENTRIES_PER_LEDGER, deliver_at, 0)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def measure_rss(kind: str, count: int) -> dict[str, float]:
    """Resident-set growth per index; meant to run in a fresh process."""
    times = delivery_times(count)
    storage = MemoryBucketSnapshotStorage()
    before = resident_bytes()
    tracker = new_tracker(kind, storage)
    fill(tracker, times)
    grown = resident_bytes() - before - storage.total_bytes()
    assert tracker.number_of_delayed_messages == count
    return {
        "rss_per_index": grown / count,
        "estimate_per_index": tracker.buffer_memory_bytes / count,
        "storage_per_index": storage.total_bytes() / count,
    }


def measure_traced(kind: str, count: int) -> float:
    times = delivery_times(count)
    storage = MemoryBucketSnapshotStorage()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracker = new_tracker(kind, storage)
        fill(tracker, times)
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tracker.number_of_delayed_messages == count
    # The storage's bytes objects are traced too; a real broker keeps them in its ledgers.
    return (traced - storage.total_bytes()) / count


def rss_in_fresh_process(kind: str, count: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, kind, str(count)], check=True, capture_output=True, text=True, timeout=600
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bytes_per_index_one_million() -> None:
    figures = {}
    for kind in ("bucket", "in-memory"):
        figures[kind] = {"traced_per_index": measure_traced(kind, COUNT), **rss_in_fresh_process(kind, COUNT)}
    print(f"\ndelayed index memory, {COUNT:,} messages over one hour, bytes per index:")
    for kind, numbers in figures.items():
        print(
            f"  {kind:>9}: tracemalloc {numbers['traced_per_index']:6.1f}   "
            f"RSS {numbers['rss_per_index']:6.1f}   estimate {numbers['estimate_per_index']:6.1f}   "
            f"(snapshot storage {numbers['storage_per_index']:.1f})"
        )
    assert figures["bucket"]["rss_per_index"] < figures["in-memory"]["rss_per_index"]
    assert figures["bucket"]["rss_per_index"] < 20


if __name__ == "__main__":
    print(json.dumps(measure_rss(sys.argv[1], int(sys.argv[2]))))
