"""Faster hand-over of the interpreter lock while the event loop runs long Python work.

The group-commit thread needs the interpreter lock for a moment after every fdatasync
before the receipts it makes durable can go out. While the event loop thread runs Python
without a pause, as it does for the whole of a ``/metrics`` scrape at many topics, CPython
gives the lock to a waiting thread only every switch interval (5 ms by default), and a
sync takes several hand-overs: publishes of other clients waited up to 1.6 to 2.1 s
during scrapes of 10,000 topics (``bench/metrics_bench.py``; no single turn of the loop
was that long). With a 0.5 ms interval during the scrape the longest wait was 43 to 56 ms,
and publish p50 was 4.3 ms; with 0.1 ms, 19 to 38 ms and 3.0 ms (the same slices).
The interval is not lowered for good: with it, 1000-message batches published 1.6 M
messages/s instead of 2.4 M (more hand-overs between the loop and the committer).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: the switch interval while such work runs
FAST_SWITCH_INTERVAL_S = 0.0001

_active = 0
_saved = 0.0


@contextmanager
def faster_thread_switching() -> Iterator[None]:
    """The lock handed over every FAST_SWITCH_INTERVAL_S inside (nested and overlapping
    uses share it); the interval from before once the last one ends."""
    global _active, _saved
    if _active == 0:
        _saved = sys.getswitchinterval()
        sys.setswitchinterval(FAST_SWITCH_INTERVAL_S)
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        if _active == 0:
            sys.setswitchinterval(_saved)
