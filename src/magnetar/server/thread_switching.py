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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the switch interval while such work runs
FAST_SWITCH_INTERVAL_S = 0.0001

_active = 0
_saved = 0.0
_hand_over_stop: threading.Event | None = None
#: how often the hand-over thread asks for the lock while such work runs
HAND_OVER_PERIOD_S = 0.002
HAND_OVER_THREAD = "magnetar-lock-hand-over"


def _ask_for_the_lock(stop: threading.Event) -> None:
    """Wake every HAND_OVER_PERIOD_S, which takes the lock from the loop thread for a moment.

    CPython makes the holder give the lock up only when a waiter saw no hand-over during its
    interval. While the loop thread keeps letting go of the lock and taking it back itself,
    the group-commit thread waiting after an fdatasync can lose every race: its sync took
    93 to 106 ms of wall time during scrapes of 50,000 topics (``bench/metrics_bench.py``,
    four runs, a publish waiting as long), where the disk's own fdatasync is at most 10 ms.
    A third thread asking every 2 ms breaks that up: 52 ms at most in the runs with it."""
    while not stop.wait(HAND_OVER_PERIOD_S):
        pass


@contextmanager
def faster_thread_switching() -> Iterator[None]:
    """The lock handed over every FAST_SWITCH_INTERVAL_S inside (nested and overlapping
    uses share it); the interval from before once the last one ends."""
    global _active, _saved, _hand_over_stop
    if _active == 0:
        _saved = sys.getswitchinterval()
        sys.setswitchinterval(FAST_SWITCH_INTERVAL_S)
        _hand_over_stop = threading.Event()
        threading.Thread(target=_ask_for_the_lock, args=(_hand_over_stop,), name=HAND_OVER_THREAD,
                         daemon=True).start()
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        if _active == 0:
            sys.setswitchinterval(_saved)
            if _hand_over_stop is not None:
                _hand_over_stop.set()
                _hand_over_stop = None
