"""AUTO_SPLIT by halving ranges (Pulsar 4.x ``HashRangeAutoSplitStickyKeyConsumerSelector``).

The hash space is cut into contiguous regions, one per consumer, each kept as its
inclusive upper end. The first consumer owns everything. A joining consumer takes the
lower half of the largest region (the lowest one when sizes tie); a leaving consumer's
region joins the region to its right, or, if it was the rightmost, the region to its
left (the diagrams of the Key_Shared section of Pulsar's messaging concepts page).

Pulsar keys the rightmost region at 65536, one past the largest hash; the split points
here are computed from that same value so assignments match Pulsar's, and snapshots
stop at 65535.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable
from typing import TypeVar

from magnetar.core.errors import ConsumerAssignError
from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    ImpactedConsumers,
    TrackedAssignments,
)
from magnetar.core.key_shared.sticky_key import HASH_RANGE_SIZE, MAX_STICKY_KEY_HASH

C = TypeVar("C", bound=Hashable)


class HashRangeAutoSplitStickyKeyConsumerSelector(TrackedAssignments[C]):
    def __init__(self, range_size: int = HASH_RANGE_SIZE, track_impacted_consumers: bool = True) -> None:
        """``range_size`` other than 65536 is for tests that need to run out of room."""
        if range_size < 2 or range_size > HASH_RANGE_SIZE or range_size & (range_size - 1):
            raise ValueError(f"range size must be a power of 2 in 2..{HASH_RANGE_SIZE}, got {range_size}")
        self.range_size = range_size
        self._track = track_impacted_consumers
        #: sorted upper ends of the regions
        self._ends: list[int] = []
        self._owner_of_end: dict[int, C] = {}
        self._end_of_owner: dict[C, int] = {}
        self._snapshot: ConsumerHashAssignmentsSnapshot[C] = ConsumerHashAssignmentsSnapshot()

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._end_of_owner

    def add_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        if consumer in self._end_of_owner:
            raise ValueError(f"consumer {consumer!r} is already in the selector")
        if not self._ends:
            self._place(self.range_size, consumer)
        else:
            self._split(self._largest_region_end(), consumer)
        return self._update_snapshot()

    def _place(self, end: int, consumer: C) -> None:
        if end not in self._owner_of_end:
            insort(self._ends, end)
        self._owner_of_end[end] = consumer
        self._end_of_owner[consumer] = end

    def _lower_end(self, end: int) -> int:
        """The end of the region below the one ending at ``end`` (0 for the lowest region)."""
        i = bisect_left(self._ends, end)
        return self._ends[i - 1] if i > 0 else 0

    def _largest_region_end(self) -> int:
        largest_size, largest_end = 0, self.range_size
        lower = 0
        for end in self._ends:
            # sizes are measured as Pulsar does (the lowest region counts one hash less),
            # which decides ties and so which region is split
            if end - lower > largest_size:
                largest_size, largest_end = end - lower, end
            lower = end
        return largest_end

    def _split(self, end: int, consumer: C) -> None:
        lower = self._lower_end(end)
        if end - lower <= 1:
            raise ConsumerAssignError(
                f"No more range can assigned to new consumer, assigned consumers {len(self._ends)}"
            )
        self._place(end - ((end - lower) >> 1), consumer)

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        end = self._end_of_owner.pop(consumer, None)
        if end is not None:
            del self._owner_of_end[end]
            del self._ends[bisect_left(self._ends, end)]
            if end == self.range_size and self._ends:
                # the rightmost region has nothing to its right: the left neighbour takes it
                left_end = self._ends.pop()
                left_owner = self._owner_of_end.pop(left_end)
                self._place(end, left_owner)
        return self._update_snapshot()

    def select(self, sticky_key_hash: int) -> C | None:
        i = bisect_left(self._ends, sticky_key_hash)
        return self._owner_of_end[self._ends[i]] if i < len(self._ends) else None

    def _build_snapshot(self) -> ConsumerHashAssignmentsSnapshot[C]:
        starts = [0, *(end + 1 for end in self._ends[:-1])]
        ends = [min(end, MAX_STICKY_KEY_HASH) for end in self._ends]
        owners = [self._owner_of_end[end] for end in self._ends]
        return ConsumerHashAssignmentsSnapshot.of_lists(starts if ends else [], ends, owners)
