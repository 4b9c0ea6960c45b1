"""The broker's one timer: every deadline of every owner, earliest first.

Delayed-delivery ticks, Key_Shared's batched unblocking and cursor persistence each
used to run their own timer in the shell. Here they are owners of deadlines in one
queue, in the manner of aioquic's ``get_timer()`` / ``handle_timer(now)``: the shell
arms a single alarm at :meth:`DeadlineQueue.next_deadline_ms` and, when it rings,
takes the owners that came due with :meth:`DeadlineQueue.pop_due`. Core code and the
simulation share this one object, so what the broker does at a given time is
reachable from a seed.

An owner has at most one deadline; scheduling an earlier one replaces it, a later
one is ignored unless ``replace`` says otherwise. Superseded heap entries are
dropped lazily when they reach the top, so scheduling costs O(log n) and nothing
scans all owners.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

K = TypeVar("K")


class DeadlineQueue(Generic[K]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._deadline: dict[K, int] = {}
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, owner: object) -> bool:
        return owner in self._deadline

    def deadline_of(self, owner: K) -> int | None:
        return self._deadline.get(owner)

    def schedule(self, owner: K, at_ms: int, *, replace: bool = False) -> None:
        """Ask for ``owner`` to come due at ``at_ms`` (the earlier of two asks wins)."""
        current = self._deadline.get(owner)
        if current is not None and (current == at_ms or (current < at_ms and not replace)):
            return
        self._deadline[owner] = at_ms
        heapq.heappush(self._heap, (at_ms, next(self._order), owner))

    def cancel(self, owner: K) -> None:
        self._deadline.pop(owner, None)

    def next_deadline_ms(self) -> int | None:
        heap = self._heap
        while heap:
            at_ms, _, owner = heap[0]
            if self._deadline.get(owner) == at_ms:
                return at_ms
            heapq.heappop(heap)
        return None

    def pop_due(self, now_ms: int) -> list[K]:
        """The owners whose deadline is at or before ``now_ms``, earliest first; each is
        forgotten, so an owner that still wants time schedules itself again."""
        due: list[K] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            at_ms, _, owner = heapq.heappop(heap)
            if self._deadline.get(owner) == at_ms:
                del self._deadline[owner]
                due.append(owner)
        return due
