"""A topic's compacted view and its compaction status (Pulsar's ``CompactedTopicImpl``).

The compacted view is the output of the last compaction that succeeded: the latest
message of every key up to the *compaction horizon*, the position the ``__compaction``
cursor's mark-delete stands at. Consumers and readers that ask for ``readCompacted`` read
through :class:`CompactedTopicSource`: before the horizon the entries of the view, after
it the topic itself, each message with the id it was published with.

The ``__compaction`` cursor is a durable subscription like any other, so retention keeps
what compaction has not read yet; its ``CompactedTopicLedger`` property names the view, and
both are written in one store transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from magnetar.core.entry import EntryInfo
from magnetar.core.errors import NotAllowed
from magnetar.core.positions import Position, to_signed64
from magnetar.core.subscriptions.subscription_view import EntrySource
from magnetar.core.topics.managed_ledger import LedgerInfo
from magnetar.wire.batch import is_batch, iter_batch
from magnetar.wire.frames import ProtocolError, parse_entry

#: Pulsar's ``Compactor.COMPACTION_SUBSCRIPTION``.
COMPACTION_SUBSCRIPTION = "__compaction"
#: Pulsar's ``Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY``: the cursor property naming the view.
COMPACTED_TOPIC_LEDGER_PROPERTY = "CompactedTopicLedger"

#: Pulsar's ``LongRunningProcessStatus.Status``.
CompactionState = Literal["NOT_RUN", "RUNNING", "SUCCESS", "ERROR"]

#: Subscription types that may read the compacted view, as Pulsar allows.
READ_COMPACTED_TYPES = ("Exclusive", "Failover")


class CompactedEntries(Protocol):
    """A stored compacted view (``storage.compacted_ledger.CompactedLedger``)."""

    ledger_id: int

    def __len__(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    def first_after(self, pos: Position) -> Position | None: ...

    def last_upto(self, pos: Position) -> Position | None: ...

    def read(self, pos: Position) -> bytes: ...

    def iter_entries(self) -> Iterator[tuple[Position, bytes]]: ...

    def close(self) -> None: ...


class CompactionAlreadyRunning(NotAllowed):
    """A compaction was asked for while one runs (the admin API answers 409)."""


@dataclass
class CompactionRecord:
    """The numbers of topic stats' ``compaction`` section (Pulsar's ``CompactionRecord``)."""

    lastCompactionRemovedEventCount: int = 0
    lastCompactionSucceedTimestamp: int = 0
    lastCompactionFailedTimestamp: int = 0
    lastCompactionDurationTimeInMills: int = 0


@dataclass
class CompactedTopic:
    """The view a topic serves and where its compaction stands."""

    horizon: Position | None = None
    view: CompactedEntries | None = None
    state: CompactionState = "NOT_RUN"
    last_error: str = ""
    started_ms: int = 0
    record: CompactionRecord = field(default_factory=CompactionRecord)

    def begin(self, now_ms: int) -> None:
        """A compaction starts; refused while another runs (Pulsar's ``AlreadyRunningException``)."""
        if self.state == "RUNNING":
            raise CompactionAlreadyRunning("Compaction already in progress")
        self.state = "RUNNING"
        self.started_ms = now_ms

    def succeeded(self, horizon: Position | None, view: CompactedEntries | None, removed: int,
                  now_ms: int) -> CompactedEntries | None:
        """The cursor naming ``view`` is durable: serve it. Returns the view it replaces."""
        old, self.view, self.horizon = self.view, view, horizon
        self.state, self.last_error = "SUCCESS", ""
        self.record.lastCompactionRemovedEventCount = removed
        self.record.lastCompactionSucceedTimestamp = now_ms
        self.record.lastCompactionDurationTimeInMills = now_ms - self.started_ms
        return old if old is not view else None

    def failed(self, error: str, now_ms: int) -> None:
        self.state, self.last_error = "ERROR", error
        self.record.lastCompactionFailedTimestamp = now_ms
        self.record.lastCompactionDurationTimeInMills = now_ms - self.started_ms

    def restore(self, horizon: Position, view: CompactedEntries | None) -> None:
        """The view named by the stored cursor, at topic load."""
        self.horizon, self.view = horizon, view

    def close(self) -> None:
        if self.view is not None:
            self.view.close()


def check_read_compacted(sub_type: str) -> None:
    if sub_type not in READ_COMPACTED_TYPES:
        raise NotAllowed("readCompacted only allowed on failover or exclusive subscriptions")


class CompactedTopicSource:
    """The topic as a ``readCompacted`` dispatcher reads it: the view up to the horizon,
    the topic after it (Pulsar's ``CompactedTopicImpl.asyncReadEntriesOrWait``)."""

    def __init__(self, topic: EntrySource, compacted: CompactedTopic) -> None:
        self.topic = topic
        self.compacted = compacted
        self.partition_index = topic.partition_index
        self._retained: tuple[Position, list[int] | None] | None = None

    def _in_view(self, pos: Position) -> bool:
        horizon = self.compacted.horizon
        return self.compacted.view is not None and horizon is not None and pos <= horizon

    def read_entry(self, pos: Position) -> bytes:
        view = self.compacted.view
        if view is not None and self._in_view(pos):
            try:
                return view.read(pos)
            except KeyError:
                pass
        return self.topic.read_entry(pos)

    def read_entry_info(self, pos: Position) -> tuple[bytes, EntryInfo]:
        if not self._in_view(pos):
            return self.topic.read_entry_info(pos)
        entry = self.read_entry(pos)
        return entry, EntryInfo.read(entry)

    def retained_ack_set(self, pos: Position) -> list[int] | None:
        """A rewritten batch's surviving indexes, as the ack set sent with it: the C++
        client (the official Python client's core) delivers ``compacted_out`` records as
        empty messages, but skips indexes the ack set clears."""
        if not self._in_view(pos):
            return None
        cached = self._retained
        if cached is not None and cached[0] == pos:
            return cached[1]
        retained = retained_indexes(self.read_entry(pos))
        self._retained = (pos, retained)
        return retained

    def next_position(self, pos: Position) -> Position:
        horizon, view = self.compacted.horizon, self.compacted.view
        if horizon is None or pos >= horizon:
            return self.topic.next_position(pos)
        found = view.first_after(pos) if view is not None else None
        if found is not None and found <= horizon:
            return found
        return self.topic.next_position(horizon)

    def last_readable(self) -> Position | None:
        """The topic's last entry; while that lies within the compacted part, the view's
        last entry (Pulsar answers GetLastMessageId from the compacted ledger then), so a
        reader whose last key was removed still learns it has read everything."""
        last = self.topic.last_readable()
        horizon = self.compacted.horizon
        if last is None or horizon is None or last > horizon:
            return last
        view = self.compacted.view
        return view.last_upto(last) if view is not None else None


def retained_indexes(entry: bytes) -> list[int] | None:
    """The ack-set words (Java ``long``s) with a bit per message not ``compacted_out``;
    None for an entry that is not a batch or hides nothing."""
    try:
        parsed = parse_entry(entry)
        if not is_batch(parsed.metadata) or parsed.metadata.encryption_keys:
            return None
        records = iter_batch(parsed.metadata, parsed.payload)
    except ProtocolError:
        return None
    if not any(single.compacted_out for single, _ in records):
        return None
    words = [0] * ((len(records) + 63) // 64)
    for index, (single, _) in enumerate(records):
        if not single.compacted_out:
            words[index // 64] |= 1 << (index % 64)
    return [to_signed64(word) for word in words]


def backlog_bytes(ledgers: list[LedgerInfo], after: Position) -> int:
    """Bytes of the entries after ``after``: whole ledgers after its ledger, and its own
    ledger in proportion to the entries left (Pulsar's ``estimateBacklogSize``)."""
    total = 0
    for info in ledgers:
        if info.ledger_id > after.ledger_id:
            total += info.size_bytes
        elif info.ledger_id == after.ledger_id and info.entries > 0:
            left = max(0, info.entries - after.entry_id - 1)
            total += info.size_bytes * left // info.entries
    return total
