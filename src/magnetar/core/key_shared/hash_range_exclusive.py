"""STICKY: consumers bring their own hash ranges (Pulsar 4.x ``HashRangeExclusiveStickyKeyConsumerSelector``).

A consumer's declared ranges (``KeySharedMeta.hashRanges``) must be valid on their own
and free: a range another consumer holds refuses the newcomer with
``ConsumerAssignError`` and leaves the selector unchanged. Hashes nobody declared are
delivered to nobody. Pulsar, before refusing, checks whether the holder's connection is
still alive (a stale consumer may not have been removed yet); ``conflicting_consumer``
lets the dispatcher do the same before calling ``add_consumer``.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, Protocol, TypeVar, runtime_checkable

from magnetar.core.errors import ConsumerAssignError
from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    ImpactedConsumers,
)
from magnetar.core.key_shared.hash_ranges import (
    HashRange,
    describe_consumer,
    find_conflicting_consumer,
    validate_sticky_ranges,
)
from magnetar.wire import pulsar_api_pb2 as pb

C = TypeVar("C", bound=Hashable)

@runtime_checkable
class DeclaresHashRanges(Protocol):
    """A consumer that subscribed with ``KeySharedMeta`` (STICKY consumers declare ranges there)."""

    key_shared_meta: pb.KeySharedMeta | None


def declared_hash_ranges(consumer: object) -> list[tuple[int, int]] | None:
    """The ranges in a consumer's ``key_shared_meta.hashRanges`` (None without metadata)."""
    if not isinstance(consumer, DeclaresHashRanges) or consumer.key_shared_meta is None:
        return None
    return [(r.start, r.end) for r in consumer.key_shared_meta.hashRanges]


class HashRangeExclusiveStickyKeyConsumerSelector(Generic[C]):
    def __init__(
        self,
        ranges_of: Callable[[C], Iterable[tuple[int, int]] | None] = declared_hash_ranges,
        track_impacted_consumers: bool = True,
    ) -> None:
        self._ranges_of = ranges_of
        self._track = track_impacted_consumers
        #: sorted, disjoint (range, consumer) pairs
        self._taken: list[tuple[HashRange, C]] = []
        self._starts: list[int] = []
        self._consumers: set[C] = set()
        self._snapshot: ConsumerHashAssignmentsSnapshot[C] = ConsumerHashAssignmentsSnapshot()

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._consumers

    def validate(self, consumer: C) -> list[HashRange]:
        """The consumer's ranges, sorted, if they are valid on their own; else ``ConsumerAssignError``."""
        return validate_sticky_ranges(self._ranges_of(consumer))

    def conflicting_consumer(self, consumer: C) -> C | None:
        """A consumer already holding a hash that ``consumer`` declares, if any."""
        return find_conflicting_consumer(self.validate(consumer), self._taken)

    def add_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        if consumer in self._consumers:
            raise ValueError(f"consumer {consumer!r} is already in the selector")
        ranges = self.validate(consumer)
        holder = find_conflicting_consumer(ranges, self._taken)
        if holder is not None:
            raise ConsumerAssignError(f"Range conflict with consumer {describe_consumer(holder)}")
        for r in ranges:
            i = bisect_right(self._starts, r.start)
            self._taken.insert(i, (r, consumer))
            insort(self._starts, r.start)
        self._consumers.add(consumer)
        return self._update_snapshot()

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        if consumer in self._consumers:
            self._consumers.discard(consumer)
            self._taken = [(r, c) for r, c in self._taken if c != consumer]
            self._starts = [r.start for r, _ in self._taken]
        return self._update_snapshot()

    def _update_snapshot(self) -> ImpactedConsumers[C] | None:
        if not self._track:
            return None
        after = ConsumerHashAssignmentsSnapshot(self._taken)
        impacted = self._snapshot.resolve_impacted_consumers(after)
        self._snapshot = after
        return impacted

    def select(self, sticky_key_hash: int) -> C | None:
        i = bisect_right(self._starts, sticky_key_hash) - 1
        if i >= 0:
            r, consumer = self._taken[i]
            if sticky_key_hash <= r.end:
                return consumer
        return None

    def snapshot(self) -> ConsumerHashAssignmentsSnapshot[C]:
        return self._snapshot if self._track else ConsumerHashAssignmentsSnapshot(self._taken)

    def consumer_key_hash_ranges(self) -> dict[C, list[HashRange]]:
        return self.snapshot().ranges_by_consumer()
