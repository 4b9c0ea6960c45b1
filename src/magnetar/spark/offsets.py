"""Source offsets: per topic partition, the last message id a query has included.

An offset is Spark's unit of progress. Ours is a JSON document with sorted keys and
a version field, so the same progress always serialises to the same text::

    {"subscription": "magnetar-spark-4f0c2b9e51d3a7c8",
     "topics": {"persistent://public/default/t-partition-0":
                    {"batchIndex": -1, "entryId": 41, "ledgerId": 7}},
     "version": 1}

Each value is the **last message included** (exclusive start of the next range,
inclusive end of this one), in Pulsar's message id layout without the partition
(it is in the topic name). ``batchIndex`` -1 means the whole entry: every message
of a batch entry. ``(-1, -1, -1)`` is Pulsar's ``MessageId.earliest``: nothing
included yet. Ordering follows storage order, so offsets compare as tuples once the
batch index -1 is read as "after every batch index of that entry".

``subscription`` names the durable subscription that holds the query's data on the
broker (see :mod:`magnetar.spark.holding`). It travels in every offset, so a query
restarted from its checkpoint finds its subscription again; offsets written before it
existed have none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.spark.message_ids import BATCH_INDEX, ENTRY_ID, LEDGER_ID, decode_fields

OFFSET_VERSION = 1
#: Reads ``batchIndex`` -1 ("the whole entry") as later than any real batch index.
_WHOLE_ENTRY = 1 << 31


class OffsetError(ValueError):
    """An offset document or message id that cannot be used; the message says which and why."""


@dataclass(frozen=True, order=False)
class MessagePosition:
    """A message id without its partition: ledger, entry and batch index (-1: whole entry)."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id < 0

    @property
    def sort_key(self) -> tuple[int, int, int]:
        batch = self.batch_index if self.batch_index >= 0 else _WHOLE_ENTRY
        return (self.ledger_id, self.entry_id, batch)

    def __lt__(self, other: MessagePosition) -> bool:
        return self.sort_key < other.sort_key

    def __le__(self, other: MessagePosition) -> bool:
        return self.sort_key <= other.sort_key

    def __gt__(self, other: MessagePosition) -> bool:
        return self.sort_key > other.sort_key

    def __ge__(self, other: MessagePosition) -> bool:
        return self.sort_key >= other.sort_key

    def same_entry(self, other: MessagePosition) -> bool:
        return self.ledger_id == other.ledger_id and self.entry_id == other.entry_id

    def follows(self, previous: MessagePosition) -> bool:
        """True when no message can exist strictly between ``previous`` and this one."""
        if previous.is_earliest:
            return True
        if self.same_entry(previous):
            return previous.batch_index >= 0 and self.batch_index == previous.batch_index + 1
        return (self.ledger_id == previous.ledger_id and self.entry_id == previous.entry_id + 1
                and self.batch_index <= 0)

    def to_json(self) -> dict[str, int]:
        return {"batchIndex": self.batch_index, "entryId": self.entry_id, "ledgerId": self.ledger_id}

    def __str__(self) -> str:
        if self.is_earliest:
            return "earliest"
        if self.batch_index >= 0:
            return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def from_json(cls, value: Any, where: str) -> MessagePosition:
        """Parse one partition's value: a position dict, ``"L:E[:B]"``, ``"earliest"`` or
        pulsar-spark's serialised message id (a list of byte values)."""
        if isinstance(value, Mapping):
            try:
                ledger, entry = int(value["ledgerId"]), int(value["entryId"])
                batch = int(value.get("batchIndex", -1))
            except (KeyError, TypeError, ValueError):
                raise OffsetError(f"{where}: expected {{'ledgerId', 'entryId'[, 'batchIndex']}}, "
                                  f"got {value!r}") from None
            return cls.normalised(ledger, entry, batch)
        if isinstance(value, str):
            return cls.parse(value, where)
        if isinstance(value, list) and all(isinstance(b, int) and -128 <= b <= 255 for b in value):
            return cls.from_serialized(bytes(b & 0xFF for b in value), where)
        raise OffsetError(f"{where}: cannot read {value!r} as a message id")

    @classmethod
    def parse(cls, text: str, where: str) -> MessagePosition:
        if text.strip().lower() == "earliest":
            return EARLIEST
        parts = text.strip().split(":")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) not in (2, 3):
            raise OffsetError(f"{where}: {text!r} is not 'ledgerId:entryId[:batchIndex]'")
        return cls.normalised(numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else -1)

    @classmethod
    def from_serialized(cls, data: bytes, where: str) -> MessagePosition:
        """Read a serialised ``MessageIdData`` (what ``MessageId.serialize()`` returns)."""
        try:
            fields = decode_fields(data)
        except (IndexError, ValueError):
            raise OffsetError(f"{where}: not a serialised Pulsar message id") from None
        return cls.normalised(fields.get(LEDGER_ID, -1), fields.get(ENTRY_ID, -1), fields.get(BATCH_INDEX, -1))

    @classmethod
    def normalised(cls, ledger_id: int, entry_id: int, batch_index: int = -1) -> MessagePosition:
        if ledger_id < 0:
            return EARLIEST
        return cls(ledger_id, entry_id, batch_index if batch_index >= 0 else -1)


EARLIEST = MessagePosition(-1, -1, -1)


@dataclass(frozen=True)
class SourceOffset:
    """Progress of a query: the last message included, per topic partition."""

    positions: Mapping[str, MessagePosition]
    #: The durable subscription holding the query's data (None: offsets of an older release).
    subscription: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A dict whose ``json.dumps`` is deterministic: keys inserted in sorted order."""
        topics = {name: self.positions[name].to_json() for name in sorted(self.positions)}
        doc: dict[str, Any] = {"topics": topics, "version": OFFSET_VERSION}
        if self.subscription is not None:
            doc = {"subscription": self.subscription, **doc}
        return doc

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, doc: Any) -> SourceOffset:
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except json.JSONDecodeError as exc:
                raise OffsetError(f"offset is not JSON: {exc}") from None
        if not isinstance(doc, Mapping) or not isinstance(doc.get("topics"), Mapping):
            raise OffsetError(f"offset must be {{'topics': {{...}}, 'version': {OFFSET_VERSION}}}, got {doc!r}")
        version = doc.get("version")
        if version != OFFSET_VERSION:
            raise OffsetError(f"offset version {version!r} is not supported (this build reads version "
                              f"{OFFSET_VERSION}); the checkpoint was written by another Magnetar release")
        subscription = doc.get("subscription")
        if subscription is not None and not isinstance(subscription, str):
            raise OffsetError(f"offset: subscription must be a name, got {subscription!r}")
        return cls({str(name): MessagePosition.from_json(value, f"offset of {name}")
                    for name, value in doc["topics"].items()}, subscription)

    def get(self, topic: str) -> MessagePosition:
        return self.positions.get(topic, EARLIEST)
