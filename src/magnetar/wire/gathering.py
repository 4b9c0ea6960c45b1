"""Small byte pieces joined into larger runs, for fewer writes (or reads, in benchmarks)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def gathered(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The pieces joined, in order, into runs of at least ``size`` bytes (the last may be
    shorter); nothing is yielded for no bytes at all, so no run is empty."""
    held: list[bytes] = []
    length = 0
    for piece in pieces:
        held.append(piece)
        length += len(piece)
        if length >= size:
            yield b"".join(held)
            held, length = [], 0
    if length:
        yield b"".join(held)
