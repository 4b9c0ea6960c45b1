"""Readers in the simulated world: non-durable subscriptions that must see every message.

A reader subscribes as an exclusive consumer of a subscription of its own that lives
only while it is connected, starting at the earliest message or at a message id. Its
contract is the strictest of all: from its start on it receives every entry, in order,
each exactly once, with the bytes that were published. The reader checks that itself as
entries arrive; the world only tells it what was published.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.core.entry import EntryInfo
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.testing.sim.checkers import Violation

READER_PREFIX = "reader-"


def start_after(start: Position | None, last_durable: Position | None) -> Position:
    """Where a reader or a seek starts after: before ``start`` (earliest when None), but never
    past the last durable entry (an id not readable yet means "what comes next")."""
    if start is None:
        return BEFORE_START
    last = last_durable if last_durable is not None else BEFORE_START
    return min(Position(start.ledger_id, start.entry_id - 1), last)


@dataclass(eq=False)
class SimReader:
    name: str
    queue_size: int
    #: every published entry in order, shared with the world (it grows as producers publish)
    published: list[Position]
    entries: dict[Position, bytes]
    #: index in ``published`` of the entry the reader must get next
    next_index: int
    core: Consumer | None = None
    sub: Subscription | None = None
    inbox: deque[Position] = field(default_factory=deque)
    consumed: int = 0
    permits: int = 0
    received: int = 0

    @property
    def subscription(self) -> str:
        return READER_PREFIX + self.name

    def delivered(self, pos: Position, entry: bytes, messages: int) -> None:
        """The broker sent ``pos``: it must be the next entry, with permits left."""
        if self.permits <= 0:
            raise Violation(f"reader {self.name}: {pos} sent with no permits left")
        expected = self.published[self.next_index] if self.next_index < len(self.published) else None
        if pos != expected:
            raise Violation(f"reader {self.name}: got {pos}, expected {expected} "
                            "(every entry from its start, in order, once)")
        if self.entries[pos] != entry:
            raise Violation(f"reader {self.name}: {pos} sent with bytes other than those published")
        self.permits -= messages
        self.next_index += 1
        self.received += 1
        self.inbox.append(pos)

    def missing(self, last_durable: Position | None) -> list[Position]:
        """Durable entries the reader has not been sent yet."""
        if last_durable is None:
            return []
        return [p for p in self.published[self.next_index:] if p <= last_durable]


class ReaderSink:
    """The reader's end of the connection; ``note`` records each delivery in the world's trace."""

    def __init__(self, reader: SimReader, note: Callable[[str], None]) -> None:
        self.reader = reader
        self.note = note

    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        if ack_set:
            raise Violation(f"reader {self.reader.name}: {pos} sent with an ack set; a reader acknowledges nothing")
        self.note(f"{pos} -> reader {self.reader.name}")
        self.reader.delivered(pos, entry, EntryInfo.read(entry).num_messages)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        pass

    def reached_end_of_topic(self, consumer_id: int) -> None:
        raise Violation(f"reader {self.reader.name} told of the end of a topic nobody terminated")

    def close_consumer(self, consumer_id: int) -> None:
        raise Violation(f"the broker closed reader {self.reader.name} unasked")
