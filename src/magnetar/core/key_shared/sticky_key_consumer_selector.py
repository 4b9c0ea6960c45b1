"""What every Key_Shared consumer selector offers (Pulsar 4.x ``StickyKeyConsumerSelector``).

A selector maps a sticky key hash to one connected consumer. Joins and leaves return
the consumers whose hashes moved away from them (a snapshot diff), so the dispatcher
can start draining those hashes; ``None`` when the selector was built without that
tracking (the classic dispatcher does not need it).

Consumers are opaque: hashable, compared by identity in practice, with a
``consumer_name`` (consistent hashing places ring points by name).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

from magnetar.core.key_shared.consumer_hash_assignments_snapshot import (
    ConsumerHashAssignmentsSnapshot,
    ImpactedConsumers,
)
from magnetar.core.key_shared.hash_ranges import HashRange

C = TypeVar("C", bound=Hashable)


class StickyKeyConsumerSelector(Protocol[C]):
    def add_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        """Add a consumer; raises ``ConsumerAssignError`` and changes nothing if it cannot be placed."""
        ...

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C] | None:
        """Remove a consumer; removing one that is not there changes nothing."""
        ...

    def select(self, sticky_key_hash: int) -> C | None:
        """The consumer for a hash, or None when no consumer owns it."""
        ...

    def snapshot(self) -> ConsumerHashAssignmentsSnapshot[C]:
        """The current assignment as an immutable value."""
        ...

    def consumer_key_hash_ranges(self) -> dict[C, list[HashRange]]:
        """Each consumer's merged ranges, for the ``keyHashRanges`` consumer stat."""
        ...
