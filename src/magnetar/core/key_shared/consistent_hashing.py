"""AUTO_SPLIT by consistent hashing (Pulsar 4.x ``ConsistentHashingStickyKeyConsumerSelector``).

Each consumer marks ``replica_points`` points on a ring of hashes 1..65535 (broker
setting ``subscriptionKeySharedConsistentHashingReplicaPoints``, default 100). Point
``i`` of a consumer sits at the sticky key hash of ``name NUL nameIndex NUL i``: the
name index tells apart consumers sharing a name (the first free index is taken, so a
consumer that leaves and comes back lands on the same points). A hash belongs to the
consumer of the first point at or after it, wrapping to the first point.

When points collide, the consumer added first keeps the point and the others queue
behind it in order of arrival; when the holder leaves, the next in line takes over.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    ImpactedConsumers,
    TrackedAssignments,
)
from magnetar.core.key_shared.sticky_key import MAX_STICKY_KEY_HASH, STICKY_KEY_HASH_NOT_SET, sticky_key_hash

#: Pulsar's default for ``subscriptionKeySharedConsistentHashingReplicaPoints``.
DEFAULT_REPLICA_POINTS = 100


class NamedConsumer(Protocol):
    @property
    def consumer_name(self) -> str: ...

    def __hash__(self) -> int: ...


N = TypeVar("N", bound=NamedConsumer)
K = TypeVar("K", bound=Hashable)


class ConsumerNameIndexTracker(Generic[K]):
    """Gives each consumer the lowest index not in use by another consumer of its name."""

    def __init__(self) -> None:
        self._used: dict[str, set[int]] = {}
        self._index: dict[K, tuple[str, int]] = {}

    def acquire(self, consumer: K, name: str) -> int:
        if consumer in self._index:
            return self._index[consumer][1]
        used = self._used.setdefault(name, set())
        index = next(i for i in range(len(used) + 1) if i not in used)
        used.add(index)
        self._index[consumer] = (name, index)
        return index

    def release(self, consumer: K) -> int | None:
        """Free the consumer's index and return it; None if it had none."""
        tracked = self._index.pop(consumer, None)
        if tracked is None:
            return None
        name, index = tracked
        used = self._used[name]
        used.discard(index)
        if not used:
            del self._used[name]
        return index

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._index

    def index_of(self, consumer: K) -> int | None:
        tracked = self._index.get(consumer)
        return None if tracked is None else tracked[1]


def ring_point_hash(consumer_name: str, name_index: int, point_index: int) -> int:
    """Where point ``point_index`` of a consumer sits on the ring."""
    return sticky_key_hash(f"{consumer_name}\0{name_index}\0{point_index}".encode())


class ConsistentHashingStickyKeyConsumerSelector(TrackedAssignments[N]):
    def __init__(
        self, replica_points: int = DEFAULT_REPLICA_POINTS, track_impacted_consumers: bool = True
    ) -> None:
        if replica_points < 1:
            raise ValueError(f"replica_points must be at least 1, got {replica_points}")
        self.replica_points = replica_points
        self._track = track_impacted_consumers
        #: sorted ring point hashes, and the consumer holding each
        self._points: list[int] = []
        self._holders: list[N] = []
        #: per point, the consumers on it in order of arrival; the first one holds it
        self._owners: dict[int, list[N]] = {}
        self._name_indexes: ConsumerNameIndexTracker[N] = ConsumerNameIndexTracker()
        self._snapshot: ConsumerHashAssignmentsSnapshot[N] = ConsumerHashAssignmentsSnapshot()

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._name_indexes

    def _point_hashes(self, consumer: N, name_index: int) -> list[int]:
        return [ring_point_hash(consumer.consumer_name, name_index, i) for i in range(self.replica_points)]

    def add_consumer(self, consumer: N) -> ImpactedConsumers[N] | None:
        if consumer in self:
            raise ValueError(f"consumer {consumer!r} is already in the selector")
        name_index = self._name_indexes.acquire(consumer, consumer.consumer_name)
        # a consumer whose own points collide is queued behind itself, so that
        # removing it point by point later stays symmetric
        for point in self._point_hashes(consumer, name_index):
            owners = self._owners.get(point)
            if owners is None:
                self._owners[point] = [consumer]
                i = bisect_left(self._points, point)
                self._points.insert(i, point)
                self._holders.insert(i, consumer)
            else:
                owners.append(consumer)
        return self._update_snapshot()

    def remove_consumer(self, consumer: N) -> ImpactedConsumers[N] | None:
        name_index = self._name_indexes.release(consumer)
        if name_index is not None:
            for point in self._point_hashes(consumer, name_index):
                owners = self._owners[point]
                owners.remove(consumer)
                i = bisect_left(self._points, point)
                if owners:
                    self._holders[i] = owners[0]
                else:
                    del self._owners[point]
                    del self._points[i]
                    del self._holders[i]
        return self._update_snapshot()

    def select(self, sticky_key_hash: int) -> N | None:
        if not self._points:
            return None
        i = bisect_left(self._points, sticky_key_hash)
        return self._holders[i] if i < len(self._points) else self._holders[0]

    def _build_snapshot(self) -> ConsumerHashAssignmentsSnapshot[N]:
        starts: list[int] = []
        ends: list[int] = []
        owners: list[N] = []
        start = STICKY_KEY_HASH_NOT_SET + 1
        for point, owner in zip(self._points, self._holders, strict=True):
            if owners and owners[-1] == owner:
                ends[-1] = point  # the same consumer again: one range
            else:
                starts.append(start)
                ends.append(point)
                owners.append(owner)
            start = point + 1
        if owners and start <= MAX_STICKY_KEY_HASH:
            # the hashes after the last point wrap around to the first point's owner
            if owners[-1] == owners[0]:
                ends[-1] = MAX_STICKY_KEY_HASH
            else:
                starts.append(start)
                ends.append(MAX_STICKY_KEY_HASH)
                owners.append(owners[0])
        return ConsumerHashAssignmentsSnapshot.of_lists(starts, ends, owners)
