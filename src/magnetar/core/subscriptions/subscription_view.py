"""A subscription and its topic as dispatchers and delayed delivery see them.

Dispatchers belong to a subscription and delayed delivery to a topic, and both need to
read the objects they belong to. Typing them against ``Subscription`` and ``Topic``
would make those modules import each other in a circle; these Protocols, in a module
that imports neither, say exactly what is read, and ``Subscription`` and ``Topic``
satisfy them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.entry import EntryInfo
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor import Cursor
from magnetar.core.topics.managed_ledger import ManagedLedger

EntryReader = Callable[[Position], "tuple[bytes, EntryInfo] | None"]


class EntrySource(Protocol):
    """The topic as a dispatcher sees it."""

    partition_index: int

    def read_entry(self, pos: Position) -> bytes: ...

    def read_entry_info(self, pos: Position) -> tuple[bytes, EntryInfo]: ...

    def next_position(self, pos: Position) -> Position: ...

    def last_readable(self) -> Position | None: ...

    def retained_ack_set(self, pos: Position) -> list[int] | None:
        """The batch indexes of the entry a consumer may still receive (None: all of them);
        a compacted batch hides the messages compaction left out."""
        ...


class ReadPosition(Protocol):
    @property
    def last_read(self) -> Position: ...


class TopicView(EntrySource, Protocol):
    @property
    def name(self) -> TopicName: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def subscriptions(self) -> Mapping[str, SubscriptionView]: ...

    def read_entry(self, pos: Position) -> bytes: ...

    def next_position(self, pos: Position) -> Position: ...

    def entries_between(self, start: Position, end: Position) -> int: ...

    def position_before(self, start: Position) -> Position: ...

    def delayed_holds(self, sub: SubscriptionView, pos: Position, now_ms: int,
                      read: EntryReader | None = None) -> bool: ...


class SubscriptionView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def topic(self) -> TopicView: ...

    @property
    def cursor(self) -> Cursor: ...

    @property
    def sub_type(self) -> str: ...

    @property
    def redelivery_counts(self) -> dict[Position, int]: ...

    @property
    def max_unacked_per_consumer(self) -> int: ...

    @property
    def max_unacked_per_subscription(self) -> int: ...

    @property
    def dispatcher(self) -> ReadPosition: ...

    @property
    def source(self) -> EntrySource: ...

    delayed_tracker: DelayedDeliveryTracker | None

    def delayed_holds(self, pos: Position, now_ms: int, read: EntryReader | None = None) -> bool: ...
