"""What every dispatcher shares: reading the next entry after the last one read.

A dispatcher keeps ``last_read``, the position of the last entry it took from the
ledger (or the position before the first entry to read). Storing the last position
rather than the next one lets the ledger decide, at read time, where the following
entry lives (a new ledger may have been opened in between).

The last entry read is kept with its parsed metadata (``read_info``): a Shared or
Key_Shared dispatcher asks delayed delivery about an entry and then sends it, and
parsing its metadata once for both halves the cost of dispatching plain entries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from magnetar.core.dispatchers.dispatch_throttle import DispatchThrottle
from magnetar.core.entry import EntryInfo, unacked_in_ack_set
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor import and_words
from magnetar.core.subscriptions.subscription_view import EntrySource, SubscriptionView

#: Makes the dispatcher of a subscription's type (``Topic(dispatcher_factory=...)``).
DispatcherFactory = Callable[[SubscriptionView, str], "Dispatcher"]


MAX_HELD_PER_ROUND = 2000


class Dispatcher(ABC):
    def __init__(self, sub: SubscriptionView) -> None:
        self.sub = sub
        self.source: EntrySource = sub.source
        self.consumers: list[Consumer] = []
        self.last_read: Position = sub.cursor.mark_delete
        #: delayed entries passed over in this round; reading stops at the budget so one
        #: dispatch call never walks a whole backlog of delayed messages
        self.held_this_round = 0
        #: the budget ran out with entries left to read: the shell should dispatch again soon
        self.read_more = False
        self._last_info: tuple[Position, bytes, EntryInfo] | None = None
        #: dispatch rate limits (None: none apply)
        self.throttle: DispatchThrottle | None = None
        #: the subscription's unacked-message limit holds every consumer
        self.blocked_on_unacked = False

    # -- consumers -------------------------------------------------------
    @abstractmethod
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None: ...

    @abstractmethod
    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None: ...

    @abstractmethod
    def redeliver(self, consumer: Consumer, positions: list[Position] | None, now_ms: int) -> None: ...

    @abstractmethod
    def dispatch(self, now_ms: int) -> None: ...

    def begin_round(self) -> None:
        self.held_this_round = 0
        self.read_more = False

    def on_flow(self, consumer: Consumer, permits: int, now_ms: int) -> None:
        consumer.permits += permits
        self.begin_round()
        self.dispatch(now_ms)

    def on_writable(self, consumer: Consumer, now_ms: int) -> None:
        """The consumer's connection drained below its low-water mark."""
        self.begin_round()
        self.dispatch(now_ms)

    def on_acked(self, consumer: Consumer, now_ms: int) -> None:
        """Acks may unblock a consumer or the subscription; subclasses add more."""
        self.begin_round()
        self.dispatch(now_ms)

    def on_limits_changed(self, now_ms: int) -> None:
        """The subscription's unacked limits changed (a policy): a consumer held by the old
        ones may take messages again."""
        self.begin_round()
        self.dispatch(now_ms)

    def rewind(self) -> None:
        """Read again from the first unacknowledged entry."""
        self.last_read = self.sub.cursor.mark_delete

    def seek(self, last_read: Position) -> None:
        self.last_read = last_read

    # -- stats -----------------------------------------------------------
    def active_consumer(self) -> Consumer | None:
        """The consumer messages go to when the type has one (Exclusive, Failover)."""
        return None

    def subscription_stats(self) -> dict[str, object]:
        """Fields the subscription's type adds to its stats (Key_Shared's)."""
        return {}

    def consumer_stats(self, consumer: Consumer) -> dict[str, object]:
        """Fields the subscription's type adds to a consumer's stats."""
        return {}

    # -- reading ---------------------------------------------------------
    def next_unread(self) -> Position | None:
        """The next entry after ``last_read`` that is readable and not yet acknowledged."""
        last = self.source.last_readable()
        cursor = self.sub.cursor
        if self.held_this_round >= MAX_HELD_PER_ROUND:
            self.read_more = last is not None and self.last_read < last
            return None
        while last is not None and self.last_read < last:
            pos = self.source.next_position(self.last_read)
            if pos > last:
                return None
            self.last_read = pos
            if not cursor.is_acked(pos):
                return pos
        return None

    def read_info(self, pos: Position) -> tuple[bytes, EntryInfo] | None:
        """The entry's bytes and metadata facts; None if it is gone. Entries never change,
        so the last one read is answered again without reading or parsing it."""
        last = self._last_info
        if last is not None and last[0] == pos:
            return last[1], last[2]
        try:
            entry, info = self.source.read_entry_info(pos)
        except KeyError:
            return None
        self._last_info = (pos, entry, info)
        return entry, info

    def load(self, pos: Position) -> tuple[bytes, EntryInfo, list[int] | None, int] | None:
        """Entry bytes, metadata facts, remaining ack set and message count; None if gone."""
        read = self.read_info(pos)
        if read is None:
            return None
        entry, info = read
        if info.is_marker:
            self.sub.cursor.ack(pos)
            return None
        ack_set = self.sub.cursor.remaining_ack_set(pos)
        retained = self.source.retained_ack_set(pos)
        if retained is not None:
            ack_set = retained if ack_set is None else and_words(ack_set, retained)
        return entry, info, ack_set, unacked_in_ack_set(ack_set, info.num_messages)

    def send(self, consumer: Consumer, pos: Position, loaded: tuple[bytes, EntryInfo, list[int] | None, int],
             now_ms: int, sticky_hash: int = 0) -> None:
        entry, _info, ack_set, messages = loaded
        consumer.deliver(pos, self.source.partition_index, entry, messages,
                         self.sub.redelivery_counts.get(pos, 0), ack_set, now_ms, sticky_hash)
        if self.throttle is not None:
            self.throttle.on_sent(messages, len(entry), now_ms)
