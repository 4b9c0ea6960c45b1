"""A topic's ledger list as the metadata store keeps it, with who writes the open ledger.

Pulsar's ``ManagedLedgerInfo`` (``/managed-ledgers/...``): the topic's ledgers in order,
each closed at a number of entries or, the last one, open. Pulsar leaves the writer to
BookKeeper's ledger metadata; with ledgers as files on a shared filesystem there is no
BookKeeper, so the list names the open ledger's writer (broker and store session). Every
change is a compare-and-set on the node's version, which is what makes one writer per
ledger: a broker creates a ledger's file only after its write adding the ledger won.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace


class InvalidLedgerList(ValueError):
    """A ledger-list node whose value cannot be read, or a change that would break its rules."""


@dataclass(frozen=True, slots=True)
class LedgerWriter:
    """A writer is a broker within one store session: the same broker after a lost session
    is another writer, whose earlier ledger must be fenced like anyone's."""

    broker_id: str
    session_id: int

    def __str__(self) -> str:
        return f"{self.broker_id}#{self.session_id}"


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    #: entries in the ledger once closed; ``None`` while open
    entries: int | None
    writer: LedgerWriter | None = None

    @property
    def open(self) -> bool:
        return self.entries is None


@dataclass(frozen=True, slots=True)
class ManagedLedgerInfo:
    ledgers: tuple[LedgerInfo, ...] = ()

    def __post_init__(self) -> None:
        ids = [ledger.ledger_id for ledger in self.ledgers]
        if ids != sorted(set(ids)):
            raise InvalidLedgerList(f"ledger ids must increase: {ids}")
        if any(ledger.open for ledger in self.ledgers[:-1]):
            raise InvalidLedgerList("only the last ledger may be open")

    @property
    def open_ledger(self) -> LedgerInfo | None:
        return self.ledgers[-1] if self.ledgers and self.ledgers[-1].open else None

    def next_ledger_id(self) -> int:
        return self.ledgers[-1].ledger_id + 1 if self.ledgers else 1

    def with_open_closed_at(self, entries: int) -> ManagedLedgerInfo:
        """This list with its open ledger closed at ``entries`` (the fence's record)."""
        last = self.open_ledger
        if last is None:
            raise InvalidLedgerList("no open ledger to close")
        return ManagedLedgerInfo((*self.ledgers[:-1], replace(last, entries=entries)))

    def with_new_ledger(self, writer: LedgerWriter) -> ManagedLedgerInfo:
        """This list with a new open ledger for ``writer``; the last one must be closed."""
        if self.open_ledger is not None:
            raise InvalidLedgerList("close the open ledger before adding one")
        return ManagedLedgerInfo((*self.ledgers, LedgerInfo(self.next_ledger_id(), None, writer)))

    def to_json(self) -> bytes:
        return json.dumps({"ledgerInfo": [
            {"ledgerId": ledger.ledger_id, "entries": ledger.entries,
             "writer": None if ledger.writer is None else
             {"brokerId": ledger.writer.broker_id, "sessionId": ledger.writer.session_id}}
            for ledger in self.ledgers]}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ManagedLedgerInfo:
        try:
            return cls(tuple(
                LedgerInfo(int(item["ledgerId"]), None if item.get("entries") is None else int(item["entries"]),
                           None if item.get("writer") is None else
                           LedgerWriter(str(item["writer"]["brokerId"]), int(item["writer"]["sessionId"])))
                for item in json.loads(data)["ledgerInfo"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidLedgerList(f"ledger-list node cannot be read: {data[:80]!r}") from exc
