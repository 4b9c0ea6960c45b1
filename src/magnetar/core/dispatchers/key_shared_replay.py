"""Key_Shared's replay queue: entries waiting to be (re)delivered, grouped by sticky key hash.

Pulsar's ``MessageRedeliveryController`` keeps positions with their hashes and answers
``containsStickyKeyHash``. Here each hash keeps its own position-ordered line, so a
dispatch round tries one head per waiting hash rather than every waiting entry: a
blocked hash with thousands of entries behind it costs one attempt, not thousands
(Pulsar's ``testNoRepeatedReadAndDiscard`` concern).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterator

from magnetar.core.positions import Position


class KeyedReplayQueue:
    def __init__(self) -> None:
        self._hash_of: dict[Position, int] = {}
        #: per hash, its waiting positions in order (a deque: most adds come in order)
        self._lines: dict[int, deque[Position]] = {}

    def __len__(self) -> int:
        return len(self._hash_of)

    def __contains__(self, pos: object) -> bool:
        return pos in self._hash_of

    def __iter__(self) -> Iterator[Position]:
        """Every waiting position, smallest first."""
        return iter(sorted(self._hash_of))

    def hash_of(self, pos: Position) -> int | None:
        return self._hash_of.get(pos)

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
        elif not line or line[-1] < pos:
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
