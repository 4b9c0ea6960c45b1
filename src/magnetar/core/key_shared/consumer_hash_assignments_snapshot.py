"""Which consumer owns which sticky key hashes at one moment, and what moved between two moments.

Pulsar 4.x ``ConsumerHashAssignmentsSnapshot`` with ``ImpactedConsumersResult`` and
``RemovedHashRanges``. Selectors only produce snapshots; the hashes a join or leave took
away from a consumer are the diff of the snapshot before and the snapshot after. That
diff is what PIP-379 needs: the pending messages of a consumer whose hashes fall in its
removed ranges start draining.

Pulsar's diff walks both range lists pairwise and can miss a removed piece when one side
has a gap (a hash owned before and unowned after, inside a partially overlapping range);
this one sweeps the whole hash space, so every hash whose owner changed is reported.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from magnetar.core.key_shared.hash_ranges import FULL_HASH_RANGE, HashRange, merge_ranges

C = TypeVar("C", bound=Hashable)


class RemovedHashRanges:
    """The hash ranges one consumer lost in one change: sorted, merged, searchable."""

    __slots__ = ("ranges", "_starts")

    def __init__(self, ranges: Iterable[HashRange]) -> None:
        self.ranges: tuple[HashRange, ...] = tuple(merge_ranges(ranges))
        self._starts = [r.start for r in self.ranges]

    def __contains__(self, sticky_key_hash: object) -> bool:
        if not isinstance(sticky_key_hash, int):
            return False
        i = bisect_right(self._starts, sticky_key_hash) - 1
        return i >= 0 and sticky_key_hash <= self.ranges[i].end

    def contains_sticky_key_hash(self, sticky_key_hash: int) -> bool:
        return sticky_key_hash in self

    def __iter__(self) -> Iterator[HashRange]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemovedHashRanges) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)

    def __repr__(self) -> str:
        return f"RemovedHashRanges({', '.join(map(str, self.ranges))})"


#: Per consumer, the hashes a change took away from it (Pulsar's ImpactedConsumersResult).
ImpactedConsumers = dict[C, RemovedHashRanges]


class ConsumerHashAssignmentsSnapshot(Generic[C]):
    """An immutable, validated map from hash ranges to consumers.

    Ranges are sorted, disjoint and inside 0..65535; hashes in no range belong to no
    consumer (possible only in STICKY mode). Kept as three parallel lists (starts, ends,
    owners) because selectors rebuild and diff a snapshot on every join and leave.
    """

    __slots__ = ("_starts", "_ends", "_owners", "_ranges_by_consumer")

    def __init__(self, assignments: Iterable[tuple[tuple[int, int], C]] = ()) -> None:
        starts: list[int] = []
        ends: list[int] = []
        owners: list[C] = []
        for (start, end), consumer in assignments:
            starts.append(start)
            ends.append(end)
            owners.append(consumer)
        self._init(starts, ends, owners)

    @classmethod
    def of_lists(
        cls, starts: list[int], ends: list[int], owners: list[C]
    ) -> ConsumerHashAssignmentsSnapshot[C]:
        """A snapshot from parallel lists, which it takes over (the caller must not change them)."""
        snapshot = cls.__new__(cls)
        snapshot._init(starts, ends, owners)
        return snapshot

    def _init(self, starts: list[int], ends: list[int], owners: list[C]) -> None:
        if not len(starts) == len(ends) == len(owners):
            raise ValueError("starts, ends and owners must have the same length")
        previous_end = FULL_HASH_RANGE.start - 1
        for start, end, consumer in zip(starts, ends, owners, strict=True):
            if consumer is None:
                raise ValueError(f"range [{start}, {end}] has no consumer")
            if start > end or start < FULL_HASH_RANGE.start or end > FULL_HASH_RANGE.end:
                raise ValueError(f"range [{start}, {end}] is empty or outside {FULL_HASH_RANGE}")
            if start <= previous_end:
                raise ValueError(f"ranges must be sorted and disjoint: [{start}, {end}] after {previous_end}")
            previous_end = end
        self._starts = starts
        self._ends = ends
        self._owners = owners
        self._ranges_by_consumer: dict[C, list[HashRange]] | None = None

    @classmethod
    def empty(cls) -> ConsumerHashAssignmentsSnapshot[C]:
        return cls()

    @property
    def assignments(self) -> tuple[tuple[HashRange, C], ...]:
        return tuple(zip(map(HashRange, self._starts, self._ends), self._owners, strict=True))

    def __iter__(self) -> Iterator[tuple[HashRange, C]]:
        return iter(self.assignments)

    def __len__(self) -> int:
        return len(self._starts)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ConsumerHashAssignmentsSnapshot)
            and self._starts == other._starts
            and self._ends == other._ends
            and self._owners == other._owners
        )

    def __hash__(self) -> int:
        return hash((tuple(self._starts), tuple(self._ends), tuple(self._owners)))

    def __repr__(self) -> str:
        inner = ", ".join(f"{r}: {c!r}" for r, c in self.assignments)
        return f"ConsumerHashAssignmentsSnapshot({inner})"

    def select(self, sticky_key_hash: int) -> C | None:
        """The owner of a hash in this snapshot, or None."""
        i = bisect_right(self._starts, sticky_key_hash) - 1
        if i >= 0 and sticky_key_hash <= self._ends[i]:
            return self._owners[i]
        return None

    def ranges_by_consumer(self) -> dict[C, list[HashRange]]:
        """Each consumer's ranges, sorted, with touching ranges joined (``keyHashRanges``)."""
        if self._ranges_by_consumer is None:
            grouped: dict[C, list[HashRange]] = {}
            for start, end, consumer in zip(self._starts, self._ends, self._owners, strict=True):
                grouped.setdefault(consumer, []).append(HashRange(start, end))
            self._ranges_by_consumer = {c: merge_ranges(rs) for c, rs in grouped.items()}
        return {c: list(rs) for c, rs in self._ranges_by_consumer.items()}

    def resolve_impacted_consumers(self, after: ConsumerHashAssignmentsSnapshot[C]) -> ImpactedConsumers[C]:
        """Per consumer, the hashes it owned here and does not own in ``after``."""
        return resolve_impacted_consumers(self, after)


def resolve_impacted_consumers(
    before: ConsumerHashAssignmentsSnapshot[C], after: ConsumerHashAssignmentsSnapshot[C]
) -> ImpactedConsumers[C]:
    """Per consumer, the ranges of hashes it owned in ``before`` and lost in ``after``.

    A consumer appears only if it lost something; hashes that were unowned before and
    gained an owner impact nobody. The sweep visits each piece of the hash space where
    both owners are constant, gaps included.
    """
    b_starts, b_ends, b_owners = before._starts, before._ends, before._owners
    a_starts, a_ends, a_owners = after._starts, after._ends, after._owners
    b_count, a_count = len(b_starts), len(a_starts)
    last = FULL_HASH_RANGE.end
    lost: dict[C, list[list[int]]] = {}
    i = j = 0
    position = FULL_HASH_RANGE.start
    while position <= last:
        # the owner of ``position`` before, and where that stays true (a gap is owned by None)
        if i < b_count and b_starts[i] <= position:
            b_owner: C | None = b_owners[i]
            b_end = b_ends[i]
        else:
            b_owner, b_end = None, (b_starts[i] - 1 if i < b_count else last)
        if j < a_count and a_starts[j] <= position:
            a_owner: C | None = a_owners[j]
            a_end = a_ends[j]
        else:
            a_owner, a_end = None, (a_starts[j] - 1 if j < a_count else last)
        end = b_end if b_end < a_end else a_end
        if b_owner is not None and b_owner != a_owner:
            pieces = lost.get(b_owner)
            if pieces is None:
                lost[b_owner] = [[position, end]]
            elif pieces[-1][1] == position - 1:
                pieces[-1][1] = end
            else:
                pieces.append([position, end])
        position = end + 1
        if i < b_count and b_ends[i] < position:
            i += 1
        if j < a_count and a_ends[j] < position:
            j += 1
    return {
        consumer: RemovedHashRanges(HashRange(start, end) for start, end in pieces)
        for consumer, pieces in lost.items()
    }


class TrackedAssignments(Generic[C]):
    """A selector's view of its assignments. With ``track`` (Pulsar's
    ``trackImpactedConsumers``) the snapshot is kept after every change, so that each
    change can say which consumers lost which ranges; without, it is built when asked."""

    _track: bool
    _snapshot: ConsumerHashAssignmentsSnapshot[C]

    def _build_snapshot(self) -> ConsumerHashAssignmentsSnapshot[C]:
        raise NotImplementedError

    def _update_snapshot(self) -> ImpactedConsumers[C] | None:
        if not self._track:
            return None
        after = self._build_snapshot()
        impacted = self._snapshot.resolve_impacted_consumers(after)
        self._snapshot = after
        return impacted

    def snapshot(self) -> ConsumerHashAssignmentsSnapshot[C]:
        return self._snapshot if self._track else self._build_snapshot()

    def consumer_key_hash_ranges(self) -> dict[C, list[HashRange]]:
        return self.snapshot().ranges_by_consumer()
