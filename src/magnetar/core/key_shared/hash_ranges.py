"""Ranges of sticky key hashes, and the checks STICKY consumers' declared ranges must pass.

A range is Pulsar's ``org.apache.pulsar.client.api.Range``: both ends inclusive, printed
``[start, end]`` (the consumer stat ``keyHashRanges``). The validation follows Pulsar 4.x
``HashRangeExclusiveStickyKeyConsumerSelector`` and adds the bounds check Pulsar leaves
to clients: a bad subscription is refused with ``ConsumerAssignError`` and a message
that names the offending range or consumer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from magnetar.core.errors import ConsumerAssignError
from magnetar.core.key_shared.sticky_key import MAX_STICKY_KEY_HASH

__all__ = [
    "ConsumerAssignError",
    "HashRange",
    "FULL_HASH_RANGE",
    "merge_ranges",
    "describe_consumer",
    "find_conflicting_consumer",
    "validate_sticky_ranges",
]

C = TypeVar("C", bound=Hashable)


class HashRange(NamedTuple):
    """Sticky key hashes ``start..end``, both inclusive; orders by start, then end."""

    start: int
    end: int

    def __contains__(self, sticky_key_hash: object) -> bool:
        return isinstance(sticky_key_hash, int) and self.start <= sticky_key_hash <= self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    def overlaps(self, other: HashRange) -> bool:
        return max(self.start, other.start) <= min(self.end, other.end)

    def as_list(self) -> list[int]:
        """The ``keyHashRangeArrays`` form: ``[start, end]``."""
        return [self.start, self.end]


#: Every hash a sticky key can have.
FULL_HASH_RANGE = HashRange(0, MAX_STICKY_KEY_HASH)


def merge_ranges(ranges: Iterable[HashRange]) -> list[HashRange]:
    """Sort ranges and join the ones that overlap or touch."""
    merged: list[HashRange] = []
    for r in sorted(ranges):
        if merged and merged[-1].end >= r.start - 1:
            last = merged[-1]
            merged[-1] = HashRange(last.start, max(last.end, r.end))
        else:
            merged.append(r)
    return merged


@runtime_checkable
class IdentifiedConsumer(Protocol):
    """A consumer as the broker knows it (selectors also hold plain names in tests)."""

    consumer_name: str
    consumer_id: int


def describe_consumer(consumer: object) -> str:
    """How errors and stats name a consumer: ``consumerName=…, consumerId=…`` when known."""
    if isinstance(consumer, IdentifiedConsumer):
        return f"consumerName={consumer.consumer_name}, consumerId={consumer.consumer_id}"
    return str(consumer)


def _fmt(r: HashRange) -> str:
    return f"[{r.start},{r.end}]"


def validate_sticky_ranges(ranges: Iterable[tuple[int, int]] | None) -> list[HashRange]:
    """Check one consumer's declared ranges on their own; return them sorted.

    Raises ``ConsumerAssignError`` for a missing or empty list, a range whose start is
    after its end, a range outside 0..65535, or two of the consumer's ranges overlapping.
    """
    if ranges is None:
        raise ConsumerAssignError("Must specify key shared meta for consumer.")
    checked = sorted(HashRange(int(start), int(end)) for start, end in ranges)
    if not checked:
        raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
    for i, r in enumerate(checked):
        if r.start > r.end:
            raise ConsumerAssignError(f"Fixed hash range start > end for range: {_fmt(r)}")
        if r.start < FULL_HASH_RANGE.start or r.end > FULL_HASH_RANGE.end:
            raise ConsumerAssignError(
                f"Fixed hash range {_fmt(r)} is outside the hash range {_fmt(FULL_HASH_RANGE)}"
            )
        if i + 1 < len(checked) and r.overlaps(checked[i + 1]):
            raise ConsumerAssignError(
                f"Consumer's own ranges conflict: {_fmt(r)} overlaps with {_fmt(checked[i + 1])}"
            )
    return checked


def find_conflicting_consumer(ranges: Sequence[HashRange], taken: Sequence[tuple[HashRange, C]]) -> C | None:
    """The first holder in ``taken`` (sorted, non-overlapping) of a hash in ``ranges``."""
    starts = [r.start for r, _ in taken]
    for wanted in ranges:
        # the only candidates: the last range starting at or before ``wanted.start``, and
        # the first one starting after it
        i = bisect_right(starts, wanted.start)
        for j in (i - 1, i):
            if 0 <= j < len(taken) and taken[j][0].overlaps(wanted):
                return taken[j][1]
    return None
