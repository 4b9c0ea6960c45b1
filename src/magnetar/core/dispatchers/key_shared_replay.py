"""Key_Shared's replay queue: entries waiting to be (re)delivered, grouped by sticky key hash.

Pulsar's ``MessageRedeliveryController`` keeps positions with their hashes and answers
``containsStickyKeyHash``. Here each hash keeps its own position-ordered line, and the
waiting hashes are indexed by the consumer that owns them now, so a dispatch round
looks only at the lines of consumers that can take something: a consumer without
permits, or a hash with thousands of entries behind a blocked head, costs nothing
(Pulsar's ``testNoRepeatedReadAndDiscard`` concern). The owner index is rebuilt lazily
after the hash assignment changes (``owners_changed``).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from magnetar.core.positions import Position

C = TypeVar("C", bound=Hashable)


class KeyedReplayQueue(Generic[C]):
    def __init__(self, owner_of: Callable[[int], C | None] | None = None) -> None:
        self._hash_of: dict[Position, int] = {}
        #: per hash, its waiting positions in order (a deque: most adds come in order)
        self._lines: dict[int, deque[Position]] = {}
        self._owner_of = owner_of
        #: owner -> waiting hashes it owns; None until needed, and after the assignment changed
        self._by_owner: dict[C | None, set[int]] | None = None
        self._owner_of_hash: dict[int, C | None] = {}

    def __len__(self) -> int:
        return len(self._hash_of)

    def __contains__(self, pos: object) -> bool:
        return pos in self._hash_of

    def __iter__(self) -> Iterator[Position]:
        """Every waiting position, smallest first."""
        return iter(sorted(self._hash_of))

    def contains_hash(self, sticky_hash: int) -> bool:
        return sticky_hash in self._lines

    def count_of(self, sticky_hash: int) -> int:
        line = self._lines.get(sticky_hash)
        return len(line) if line is not None else 0

    def add(self, pos: Position, sticky_hash: int) -> bool:
        """Queue ``pos`` behind the earlier entries of its hash; False if it already waits."""
        if pos in self._hash_of:
            return False
        self._hash_of[pos] = sticky_hash
        line = self._lines.get(sticky_hash)
        if line is None:
            self._lines[sticky_hash] = deque((pos,))
            self._index(sticky_hash)
        elif line[-1] < pos:
            line.append(pos)
        else:
            ordered = list(line)
            insort(ordered, pos)
            self._lines[sticky_hash] = deque(ordered)
        return True

    def discard(self, pos: Position) -> None:
        sticky_hash = self._hash_of.pop(pos, None)
        if sticky_hash is None:
            return
        line = self._lines[sticky_hash]
        if line[0] == pos:
            line.popleft()
        else:
            line.remove(pos)
        if not line:
            del self._lines[sticky_hash]
            self._unindex(sticky_hash)

    def head(self, sticky_hash: int) -> Position | None:
        """The first waiting position of a hash, or None."""
        line = self._lines.get(sticky_hash)
        return line[0] if line else None

    def heads(self) -> list[tuple[Position, int]]:
        """(first waiting position, hash) of every waiting hash, oldest first."""
        return sorted((line[0], h) for h, line in self._lines.items())

    def line(self, sticky_hash: int) -> list[Position]:
        """The waiting positions of a hash, in order (a copy)."""
        return list(self._lines.get(sticky_hash, ()))

    def clear(self) -> None:
        self._hash_of.clear()
        self._lines.clear()
        self._by_owner = None
        self._owner_of_hash.clear()

    # -- the owner index ---------------------------------------------------------------
    def owners_changed(self) -> None:
        """The hash assignment changed: the index is rebuilt when next needed."""
        self._by_owner = None
        self._owner_of_hash.clear()

    def hashes_of(self, owner: C) -> list[int]:
        """The waiting hashes that ``owner`` owns (as last told by ``owner_of``)."""
        by_owner = self._by_owner
        if by_owner is None:
            by_owner = self._rebuild()
        hashes = by_owner.get(owner)
        return list(hashes) if hashes else []

    def _rebuild(self) -> dict[C | None, set[int]]:
        self._by_owner = {}
        self._owner_of_hash.clear()
        for sticky_hash in self._lines:
            self._index(sticky_hash)
        return self._by_owner

    def _index(self, sticky_hash: int) -> None:
        if self._by_owner is None or self._owner_of is None:
            return
        owner = self._owner_of(sticky_hash)
        self._owner_of_hash[sticky_hash] = owner
        self._by_owner.setdefault(owner, set()).add(sticky_hash)

    def _unindex(self, sticky_hash: int) -> None:
        if self._by_owner is None or sticky_hash not in self._owner_of_hash:
            return
        owner = self._owner_of_hash.pop(sticky_hash)
        hashes = self._by_owner.get(owner)
        if hashes is not None:
            hashes.discard(sticky_hash)
            if not hashes:
                del self._by_owner[owner]
