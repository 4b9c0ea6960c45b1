"""Keeping the garbage collector off the event loop's back at many topics.

A loaded topic is about 76 container objects (subscriptions, cursors, dispatchers,
counters) that live for hours. CPython's full collection walks every container the
process holds, so at 10,000 topics one takes hundreds of milliseconds, on the event
loop, every time enough new long-lived objects piled up: a pause every client sees.

So after each full collection its survivors are frozen (``gc.freeze``): later full
collections walk only what was allocated since. The price is that frozen objects which
become garbage inside a reference cycle are not reclaimed while frozen; topics and
connections are such objects, so once enough of them went away since the last freeze
(``max(MIN_RELEASED, a quarter of what is loaded)``), everything is unfrozen and the next
full collection reclaims them, one long pause instead of one per collection. Memory held
by released objects is bounded by that count.

The youngest generation is collected after ``YOUNG_THRESHOLD`` net allocations instead of
CPython's 700: every published entry allocates a handful of short-lived containers
(frames, positions, receipts) that die within a loop turn, and at 700 the broker ran a
young collection every 180 entries and spent about a tenth of its loop time collecting
(``bench/broker_path_bench.py``: 557 young collections per 100,000 entries at 700, 17 at
10,000). Garbage in cycles waits a little longer; that is all it costs. The middle
generation is collected every 4 young collections (CPython's default is 10): it holds
what survived them, up to 4 x 10,000 objects, and while topics load most of it survives.
At 20 young collections per middle one, a middle collection right after loading 50,000
topics held the loop 67 to 103 ms (``bench/metrics_bench.py``); at 4, 14 to 26 ms.

What the middle collections pass on to the old generation waits there for the next full
collection, which CPython runs once it exceeds a quarter of what the last one kept: after
50,000 topics loaded, about 300,000 objects, one 292 ms pause. So once the old generation
holds more than ``OLD_UNFROZEN_MAX`` objects not yet frozen, they are frozen after the
middle collection without the full one walking them: a full collection walks at most about
that many plus a middle collection's survivors (with a bound of 50,000, full collections
during scrapes after loading 50,000 topics took 18 to 53 ms; hence 25,000). Such objects
have lived through two collections already; what of them is cyclic garbage (topics and
connections released since, mostly) waits for the unfreeze like any frozen garbage.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("magnetar.gc")

#: released topics and connections tolerated before survivors are unfrozen
MIN_RELEASED = 1000
#: objects in the old generation, not frozen, above which a middle collection freezes them
OLD_UNFROZEN_MAX = 25_000
#: (young, middle, old) collection thresholds while installed
THRESHOLDS = (10_000, 4, 10)


class LongLivedObjects:
    def __init__(self, loaded: Callable[[], int], old_unfrozen_max: int = OLD_UNFROZEN_MAX) -> None:
        """``loaded()``: how many topics and connections the broker holds now."""
        self.loaded = loaded
        self.old_unfrozen_max = old_unfrozen_max
        self.released_since_unfreeze = 0
        self.freezes = 0
        self.unfreezes = 0
        self._installed = False
        self._thresholds_before = gc.get_threshold()
        self._awaiting_full_collection = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._after_collection)
            self._thresholds_before = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._after_collection)
            gc.set_threshold(*self._thresholds_before)
            self._installed = False
            gc.unfreeze()

    @property
    def epoch(self) -> int:
        """Full collections that froze their survivors so far: an object made at this epoch
        and released at the same one was never frozen."""
        return self.freezes

    def released(self, count: int = 1, born_at: int | None = None) -> None:
        """A topic was unloaded or a connection closed (made at epoch ``born_at``, if known).
        Only what may have been frozen counts: a connection that came and went between two
        full collections is reclaimed by the collector as usual, so short-lived clients do
        not bring forward the full collection that an unfreeze costs."""
        if born_at is not None and born_at == self.freezes:
            return
        self.released_since_unfreeze += count
        if self.released_since_unfreeze >= max(MIN_RELEASED, self.loaded() // 4):
            self.unfreezes += 1
            self.released_since_unfreeze = 0
            gc.unfreeze()
            # until the full collection that reclaims them, a large old generation is the
            # unfrozen objects: freezing it again would keep their garbage for good (50,000
            # unloaded topics kept 19 KB each that way, 8.75 KB with this)
            self._awaiting_full_collection = True

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop":
            return
        generation = info.get("generation")
        if generation == 2:
            self._awaiting_full_collection = False
        elif generation != 1 or self._awaiting_full_collection or not self._old_generation_is_large():
            return
        gc.freeze()
        self.freezes += 1

    def _old_generation_is_large(self) -> bool:
        # a list of the old generation's objects (no collection runs inside a callback):
        # at most about OLD_UNFROZEN_MAX plus a middle collection's survivors, 1 to 2 ms
        return len(gc.get_objects(generation=2)) > self.old_unfrozen_max
