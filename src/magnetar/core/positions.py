"""Positions in a managed ledger: (ledger id, entry id), ordered across ledgers.

Pulsar's message id is ledgerId:entryId:partition:batchIndex; the broker only ever
deals in the first two. Ledger ids grow monotonically per broker, so tuple order is
storage order.
"""

from __future__ import annotations

from typing import NamedTuple

#: Pulsar's MessageId.earliest on the wire (-1, -1) once read as signed int64.
EARLIEST_ID = -1
#: Pulsar's MessageId.latest: Long.MAX_VALUE in both fields.
LATEST_ID = (1 << 63) - 1


def to_signed64(value: int) -> int:
    """Interpret a uint64 from the wire as Java's signed long (0xFFFF...FF -> -1)."""
    return value - (1 << 64) if value >= (1 << 63) else value


class Position(NamedTuple):
    """A ledger entry's address; tuples compare in storage order."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``ledger:entry`` as printed by ``str`` and by Pulsar's admin tools."""
        ledger, _, entry = text.partition(":")
        try:
            return cls(int(ledger), int(entry))
        except ValueError:
            raise ValueError(f"invalid position {text!r}: expected '<ledgerId>:<entryId>'") from None


#: Sorts before every real position.
BEFORE_START = Position(-1, -1)
