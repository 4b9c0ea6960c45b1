"""A topic, persistent or non-persistent: its managed ledger, producers, subscriptions
and send receipts.

Publishing appends to the ledger at once. On a persistent topic the receipt waits until
storage says the entry is durable (group commit), and only durable entries are
dispatched, so a consumer never sees a message that a crash could take back. A
non-persistent topic's ledger lives in memory: an entry counts as stored once appended,
goes to the consumers ready for it then, and what none of them took is dropped.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.compaction.compacted_topic import CompactedTopic, CompactedTopicSource, check_read_compacted
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.delayed.delayed_delivery import DelayedDelivery
from magnetar.core.dispatchers.base import DispatcherFactory
from magnetar.core.entry import EntryInfo
from magnetar.core.errors import (
    NotAllowed,
    ProducerBusy,
    ProducerFenced,
    ServerError,
    ServiceNotReady,
    SubscriptionNotFound,
    TopicTerminated,
)
from magnetar.core.names import TopicName
from magnetar.core.policies import AppliedPolicies, ledger_trimming
from magnetar.core.policies.rate_limit import RateLimiter
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.stats import RateCounter
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor import Cursor
from magnetar.core.subscriptions.subscription import Subscription, default_dispatcher
from magnetar.core.subscriptions.subscription_view import SubscriptionView
from magnetar.core.topics.managed_ledger import ManagedLedger
from magnetar.core.topics.producer import AccessMode, Producer

#: Recently published entries whose parsed metadata a topic keeps for dispatch (the facts
#: only: the entry's bytes are the ledger's to keep, within its cache's budget).
RECENT_ENTRIES_MAX = 2048


#: A send that checked out, as the publish path takes it: sequence id, highest sequence id,
#: messages, the entry and its metadata.
Send = tuple[int, int, int, bytes, EntryInfo]


@dataclass(slots=True)
class PendingReceipt:
    pos: Position
    producer: Producer
    sequence_id: int
    highest_sequence_id: int
    #: set for a duplicate: the receipt carries this position (-1, -1) instead
    duplicate_of: Position | None = None
    #: the id deduplication judged the entry by (the batch's last message)
    last_sequence_id: int = -1
    #: the business id the property deduplication window recorded for it
    dedup_id: str | None = None


class Topic:
    def __init__(self, name: TopicName, ledger: ManagedLedger, config: BrokerConfig,
                 dispatcher_factory: DispatcherFactory = default_dispatcher) -> None:
        self.name = name
        self.ledger = ledger
        self.config = config
        self.partition_index = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.waiting_producers: deque[Producer] = deque()
        self.subscriptions: dict[str, Subscription] = {}
        self.last_durable: Position | None = ledger.last_position()
        self.pending_receipts: deque[PendingReceipt] = deque()
        self.topic_epoch = 0
        self.msg_in = RateCounter()
        self.dispatcher_factory = dispatcher_factory
        self._delayed: DelayedDelivery | None = None
        #: told when the broker's periodic work must visit this topic: its cursors changed
        #: (``"cursors"``), its delayed delivery has trackers to tick (``"delayed"``), or it
        #: deduplicates (``"dedup"``: snapshots to store), so the once-a-second ticks visit
        #: those topics, not every loaded one
        self.on_attention: Callable[[Topic, str], None] = _no_attention
        self._dedup: MessageDeduplication | None = None
        self._property_dedup: PropertyDedupWindow | None = None
        #: where the dedup snapshot stands; replay after a restart starts after it
        self.dedup_snapshot_position: Position | None = None
        self.fenced = False
        #: moving to another broker: consumers, old and new, get nothing more here
        #: (:mod:`magnetar.core.topics.handover`)
        self.handing_over = False
        #: the publish rate that applies (None: no limit)
        self.publish_limiter: RateLimiter | None = None
        #: the topic's dispatch rate, shared by its subscriptions' throttles
        self.dispatch_limiter: RateLimiter | None = None
        #: its policies resolved (topic, namespace, broker); the shell applies changes
        self.applied = AppliedPolicies.of_config(config)
        #: the compacted view ``readCompacted`` consumers read, and compaction's status
        self.compacted = CompactedTopic()
        #: since when the topic has had no producer and no consumer (None: it has some)
        self.idle_since_ms: int | None = None
        #: since when the inactive-topic check has found it inactive (None: active)
        self.inactive_since_ms: int | None = None
        #: the last entry of a terminated topic: nothing is published after it
        self.terminated_at: Position | None = None
        #: Pulsar's topicCreationTimeStamp (kept in the topic's metadata) and lastPublishTimeStamp
        self.created_ms = 0
        self.last_publish_ms = 0
        #: backlog-quota evictions by quota type (``size``, ``time``)
        self.quota_evictions = {"size": 0, "time": 0}
        #: a cursor changed since the broker last looked for cursors to persist
        self.cursors_changed = False
        #: recently published entries with the metadata parsed when they were checked
        # oldest first; an OrderedDict drops its oldest in constant time, where a dict's
        # next(iter()) walks past the slots of every entry deleted before it
        self._recent: OrderedDict[Position, EntryInfo] = OrderedDict()

    def __str__(self) -> str:
        return str(self.name)

    def cursor_changed(self) -> None:
        if not self.cursors_changed:
            self.cursors_changed = True
            self.on_attention(self, "cursors")

    @property
    def dedup(self) -> MessageDeduplication | None:
        return self._dedup

    @dedup.setter
    def dedup(self, dedup: MessageDeduplication | None) -> None:
        self._dedup = dedup
        if dedup is not None:
            self.on_attention(self, "dedup")

    @property
    def property_dedup(self) -> PropertyDedupWindow | None:
        return self._property_dedup

    @property_dedup.setter
    def property_dedup(self, window: PropertyDedupWindow | None) -> None:
        self._property_dedup = window
        if window is not None:
            self.on_attention(self, "dedup")

    @property
    def delayed(self) -> DelayedDelivery | None:
        return self._delayed

    @delayed.setter
    def delayed(self, delayed: DelayedDelivery | None) -> None:
        self._delayed = delayed
        if delayed is not None:
            delayed.on_trackers = self._delayed_has_trackers
            if delayed.has_trackers:
                self.on_attention(self, "delayed")

    def _delayed_has_trackers(self) -> None:
        self.on_attention(self, "delayed")

    # -- the EntrySource the dispatchers read ---------------------------------
    def read_entry(self, pos: Position) -> bytes:
        return self.ledger.read(pos)

    def read_entry_info(self, pos: Position) -> tuple[bytes, EntryInfo]:
        """The entry and its metadata facts, parsed at publish for recent entries."""
        entry = self.ledger.read(pos)
        info = self._recent.get(pos)
        return entry, info if info is not None else EntryInfo.read(entry)

    def _forget_recent_before(self, pos: Position) -> None:
        recent = self._recent
        while recent and next(iter(recent)) < pos:
            recent.popitem(last=False)

    def next_position(self, pos: Position) -> Position:
        return self.ledger.next_position(pos)

    def last_readable(self) -> Position | None:
        return self.last_durable

    def retained_ack_set(self, pos: Position) -> list[int] | None:
        return None

    def entries_between(self, start: Position, end: Position) -> int:
        return self.ledger.entries_between(start, end)

    # -- producers ---------------------------------------------------------------
    def add_producer(self, producer: Producer) -> bool:
        """Attach; False when it must wait for exclusive access (WaitForExclusive)."""
        if self.dedup is not None and self.dedup.is_fenced:
            # as Pulsar fences a topic after a failed write until the writes in flight settle:
            # a producer attached now could have a later send stored before its resent ones
            raise ServiceNotReady(f"Topic {self.name} is temporarily unavailable")
        existing = self.producers.get(producer.producer_name)
        if existing is not None:
            raise ProducerBusy(f"Producer with name '{producer.producer_name}' is already connected to topic")
        holder = next((p for p in self.producers.values() if p.exclusive), None)
        mode = producer.access_mode
        if mode == AccessMode.Shared:
            if holder is not None:
                raise ProducerBusy(f"Topic {self.name} has an existing exclusive producer: {holder.producer_name}")
        elif mode == AccessMode.ExclusiveWithFencing:
            for other in list(self.producers.values()):
                self.remove_producer(other)
                other.sink.close_producer(other.producer_id)
            self.topic_epoch += 1
        elif self.producers:
            if mode == AccessMode.WaitForExclusive:
                self.waiting_producers.append(producer)
                return False
            raise ProducerFenced(f"Topic {self.name} has existing producers; Exclusive access refused") \
                if holder is not None else ProducerBusy(
                    f"Topic {self.name} has existing shared producers; Exclusive access refused")
        else:
            self.topic_epoch += 1
        self.producers[producer.producer_name] = producer
        return True

    def remove_producer(self, producer: Producer) -> Producer | None:
        """Detach; returns a waiting producer that now holds exclusive access, if any."""
        if producer in self.waiting_producers:
            self.waiting_producers.remove(producer)
            return None
        if self.producers.get(producer.producer_name) is producer:
            del self.producers[producer.producer_name]
        producer.closed = True
        if not self.producers and self.waiting_producers:
            promoted = self.waiting_producers.popleft()
            self.topic_epoch += 1
            self.producers[promoted.producer_name] = promoted
            return promoted
        return None

    # -- publishing ----------------------------------------------------------------
    def append(self, producer: Producer, sends: Sequence[Send], now_ms: int,
               recorded: tuple[int, str | None] | None = None) -> list[Position]:
        """Append the longest prefix of one producer's sends that the ledger takes in one
        go (at least the first); their positions. ``recorded``, for a run of one that
        deduplication judged: the sequence id and business id to record once it is
        durable (else each send records its own sequence id). The metadata the publish
        path parsed is kept for the dispatch that follows, so an entry's is parsed once."""
        self._check_accepting()
        last_id, dedup_id = recorded if recorded is not None else (None, None)
        try:
            positions = self.ledger.append_many([send[3] for send in sends])
        except Exception:
            self.forget_failed_write(producer.producer_name, dedup_id)
            raise
        recent, receipts = self._recent, self.pending_receipts
        messages = size = 0
        for pos, (sequence_id, highest, num_messages, entry, info) in zip(positions, sends, strict=False):
            recent[pos] = info
            receipts.append(PendingReceipt(pos, producer, sequence_id, highest, None,
                                           sequence_id if last_id is None else last_id, dedup_id))
            messages += num_messages
            size += len(entry)
        while len(recent) > RECENT_ENTRIES_MAX:
            recent.popitem(last=False)
        producer.msg_in.add(now_ms, messages, size, len(positions))
        self.msg_in.add(now_ms, messages, size, len(positions))
        self.last_publish_ms = now_ms
        return positions

    def _check_accepting(self) -> None:
        if self.fenced:
            raise NotAllowed(f"Topic {self.name} is being deleted or unloaded")
        if self.terminated_at is not None:
            raise TopicTerminated(f"Topic {self.name} was already terminated")

    def answer_duplicate(self, producer: Producer, sequence_id: int, highest_sequence_id: int) -> None:
        """A duplicate gets the receipt with ledger = entry = -1, in order after pending receipts."""
        duplicate = Position(-1, -1)
        if self.pending_receipts:
            last = self.pending_receipts[-1].pos
            self.pending_receipts.append(PendingReceipt(last, producer, sequence_id, highest_sequence_id, duplicate))
        else:
            producer.sink.send_receipt(producer.producer_id, sequence_id, highest_sequence_id, duplicate)

    def appends_taken_back(self, first: Position, reason: str) -> None:
        """Storage could not write the entries from ``first`` on and took them back: their
        producers get a retryable error, and deduplication forgets them so the retries
        are stored (Pulsar resets the pushed sequence ids the same way)."""
        kept: deque[PendingReceipt] = deque()
        failed: list[PendingReceipt] = []
        for receipt in self.pending_receipts:
            (failed if receipt.pos >= first else kept).append(receipt)
        self.pending_receipts = kept
        for r in failed:
            if r.duplicate_of is None:
                self.forget_failed_write(r.producer.producer_name, r.dedup_id)
        message = f"Cannot store the message on {self.name}: {reason}; retry"
        for r in failed:
            if not r.producer.closed:
                r.producer.sink.send_error(r.producer.producer_id, r.sequence_id, ServerError.PersistenceError,
                                           message)
        # as Pulsar does after a failed write, the producers are disconnected, so that each
        # resends what was not stored before anything it sent later (stored first, a later
        # send would make the resend a duplicate under deduplication: receipted, never stored)
        for producer in list(self.producers.values()):
            promoted = self.remove_producer(producer)
            producer.sink.close_producer(producer.producer_id)
            if promoted is not None:
                promoted.sink.producer_ready(promoted)

    def forget_failed_write(self, producer_name: str, dedup_id: str | None) -> None:
        """A write failed: deduplication must not count what it carried as stored."""
        if self.dedup is not None:
            self.dedup.on_write_failed(producer_name)
        if dedup_id is not None and self.property_dedup is not None:
            self.property_dedup.on_write_failed(dedup_id)

    def on_persisted(self, upto: Position, now_ms: int) -> None:
        """Storage made everything up to ``upto`` durable: receipts, then dispatch."""
        if self.last_durable is None or upto > self.last_durable:
            self.last_durable = upto
        receipts = self.pending_receipts
        batch: list[tuple[int, int, Position]] = []  # receipts of one producer, sent together
        producer: Producer | None = None
        while receipts and receipts[0].pos <= upto:
            r = receipts.popleft()
            if r.producer is not producer or r.duplicate_of is not None:
                _send_receipts(producer, batch)
                producer, batch = r.producer, []
            if r.duplicate_of is not None:
                if not r.producer.closed:
                    r.producer.sink.send_receipt(r.producer.producer_id, r.sequence_id, r.highest_sequence_id,
                                                 r.duplicate_of)
                continue
            if self.dedup is not None:
                self.dedup.on_persisted(r.producer.producer_name, r.last_sequence_id, r.pos, now_ms)
            if r.dedup_id is not None and self.property_dedup is not None:
                self.property_dedup.on_persisted(r.dedup_id)
            batch.append((r.sequence_id, r.highest_sequence_id, r.pos))
        _send_receipts(producer, batch)
        self.dispatch_all(now_ms)
        if not self.name.persistent:
            self._drop_what_was_not_taken(upto)

    def dispatch_all(self, now_ms: int) -> None:
        for sub in list(self.subscriptions.values()):
            sub.dispatcher.begin_round()
            sub.dispatcher.dispatch(now_ms)

    # -- subscriptions -------------------------------------------------------------
    def subscribe(self, name: str, consumer: Consumer, now_ms: int, *, durable: bool = True,
                  initial_earliest: bool = False, start: Position | None = None,
                  create: bool = True, read_compacted: bool = False) -> Subscription:
        if read_compacted:
            check_read_compacted(consumer.sub_type)
        sub = self.subscriptions.get(name)
        if sub is None:
            if durable and not create:
                raise SubscriptionNotFound(f"Subscription {name} not found on {self.name}")
            sub = self.create_subscription(name, consumer.sub_type, durable=durable,
                                           mark_delete=self._initial_mark_delete(initial_earliest, start))
        if not sub.consumers:
            # the dispatcher made for the first consumer reads through the source set here
            sub.source = CompactedTopicSource(self, self.compacted) \
                if read_compacted and self.name.persistent else self
        consumer.handed_over = self.handing_over
        sub.add_consumer(consumer, now_ms)
        sub.dispatcher.dispatch(now_ms)
        return sub

    def create_subscription(self, name: str, sub_type: str, *, durable: bool, mark_delete: Position,
                            properties: dict[str, int | str] | None = None) -> Subscription:
        cursor = Cursor(name, mark_delete, self.ledger.next_position, durable=durable,
                        batch_index_acks=self.config.acknowledgmentAtBatchIndexLevelEnabled,
                        properties=dict(properties or {}), on_change=self.cursor_changed)
        self.cursor_changed()
        sub = Subscription(self, cursor, sub_type, self.dispatcher_factory)
        self._apply_limits(sub)
        self.subscriptions[name] = sub
        return sub

    def apply_policies(self, applied: AppliedPolicies, now_ms: int) -> None:
        """Policies changed: limits that live subscriptions read take effect at once."""
        limits_changed = (applied.max_unacked_on_consumer, applied.max_unacked_on_subscription) != (
            self.applied.max_unacked_on_consumer, self.applied.max_unacked_on_subscription)
        self.applied = applied
        for sub in self.subscriptions.values():
            self._apply_limits(sub)
            if limits_changed:
                sub.dispatcher.on_limits_changed(now_ms)

    def _apply_limits(self, sub: Subscription) -> None:
        sub.max_unacked_per_consumer = self.applied.max_unacked_on_consumer
        sub.max_unacked_per_subscription = self.applied.max_unacked_on_subscription

    def _drop_what_was_not_taken(self, upto: Position) -> None:
        """Non-persistent: an entry goes to the consumers connected and ready when it arrives.

        What none of them could take is dropped, as Pulsar does, and entries are released
        ledger by ledger (the ledger of a non-persistent topic is small and in memory), so
        a slow or absent consumer never makes the broker hold messages.
        """
        for sub in self.subscriptions.values():
            sub.dispatcher.seek(max(sub.dispatcher.last_read, upto))
        self.ledger.trim_before(upto)
        self._forget_recent_before(upto)

    def _initial_mark_delete(self, earliest: bool, start: Position | None) -> Position:
        if not self.name.persistent:
            return self.last_durable if self.last_durable is not None else BEFORE_START
        if start is not None:
            return self.position_before(start)
        if earliest:
            return BEFORE_START
        return self.last_durable if self.last_durable is not None else BEFORE_START

    def position_before(self, start: Position) -> Position:
        """The mark-delete position that makes ``start`` the next entry read.

        A start beyond the last entry (``latest``, or an id that does not exist yet) means
        "what is published next": a mark-delete position past the end would silently
        swallow the entries appended below it.
        """
        if start.ledger_id < 0 or start.entry_id < 0:
            return BEFORE_START
        last = self.last_durable if self.last_durable is not None else BEFORE_START
        return min(Position(start.ledger_id, start.entry_id - 1), last)

    def remove_consumer(self, sub: Subscription, consumer: Consumer, now_ms: int) -> None:
        sub.remove_consumer(consumer, now_ms)
        if (not sub.durable or not self.name.persistent) and not sub.consumers:
            if self.subscriptions.pop(sub.name, None) is sub:
                self._forget_delayed(sub)

    def unsubscribe(self, name: str, force: bool = False) -> Subscription:
        sub = self.subscriptions.get(name)
        if sub is None:
            raise SubscriptionNotFound(f"Subscription {name} not found on {self.name}")
        if sub.consumers and not force:
            from magnetar.core.errors import ConsumerBusy
            raise ConsumerBusy(f"Subscription {name} has active consumers")
        for consumer in list(sub.consumers):
            consumer.sink.close_consumer(consumer.consumer_id)
            sub.remove_consumer(consumer, 0)
        del self.subscriptions[name]
        self._forget_delayed(sub)
        return sub

    def _forget_delayed(self, sub: Subscription) -> None:
        """A subscription is gone: its delayed index (and stored snapshots) with it."""
        if self.delayed is not None:
            self.delayed.remove_subscription(self, sub)
        elif sub.delayed_tracker is not None:
            sub.delayed_tracker.clear()

    def delayed_holds(self, sub: SubscriptionView, pos: Position, now_ms: int,
                      read: Callable[[Position], tuple[bytes, EntryInfo] | None] | None = None) -> bool:
        if self.delayed is None:
            return False
        return bool(self.delayed.holds(sub, pos, now_ms, read))

    # -- retention -------------------------------------------------------------------
    def apply_retention(self, now_ms: int) -> list[int]:
        """Detach the ledgers retention no longer keeps (see :mod:`magnetar.core.policies.ledger_trimming`);
        the shell removes their files off the event loop. Readers standing before what is
        left move to the first entry kept, as Pulsar's ``advanceNonDurableCursors``."""
        ledgers = self.ledger.ledgers()
        if len(ledgers) < 2:
            return []  # the current ledger alone: the common case, and never deleted
        # what is not durable yet (a ledger just rolled over) waits, cursors or not
        written = self.last_durable if self.last_durable is not None else BEFORE_START
        holders = [*durable_marks(self), written]
        count = ledger_trimming.ledgers_to_delete(ledgers, holders, self.applied.retention, now_ms)
        if count == 0:
            return []
        last_gone = Position(ledgers[count - 1].ledger_id, ledgers[count - 1].entries - 1)
        ids = self.ledger.detach_before(Position(ledgers[count].ledger_id, 0))
        for sub in self.subscriptions.values():
            if not sub.durable:
                sub.cursor.ack_cumulative(last_gone)
        self._forget_recent_before(Position(ledgers[count].ledger_id, 0))
        return ids

    # -- termination (see topic_lifecycle.terminate) ------------------------------------
    def tell_end_of_topic(self) -> None:
        """REACHED_END_OF_TOPIC, once, to each consumer of a terminated topic whose
        subscription has acknowledged every message (Pulsar's dispatchers tell the end only
        then: ``Consumer.reachedEndOfTopic`` when the backlog is empty)."""
        if self.terminated_at is None:
            return
        for sub in self.subscriptions.values():
            if sub.backlog() > 0:
                continue
            for consumer in sub.consumers:
                if not consumer.told_end_of_topic:
                    consumer.told_end_of_topic = True
                    consumer.sink.reached_end_of_topic(consumer.consumer_id)

def _send_receipts(producer: Producer | None, batch: list[tuple[int, int, Position]]) -> None:
    if producer is not None and batch and not producer.closed:
        producer.sink.send_receipts(producer.producer_id, batch)


def topic_of(sub: Subscription) -> Topic:
    """The topic a subscription belongs to, as the full object (a subscription sees it
    through :class:`~magnetar.core.subscriptions.subscription_view.TopicView`); every subscription is
    made by a topic, so this only narrows the type."""
    topic = sub.topic
    assert isinstance(topic, Topic), f"subscription {sub.name} belongs to {topic!r}, not a Topic"
    return topic


def _no_attention(topic: Topic, what: str) -> None:
    """A topic no broker core has adopted (tests of the topic alone)."""


def durable_marks(topic: Topic) -> list[Position]:
    """Where each durable cursor stands: subscriptions, and deduplication, which replays
    from its snapshot after a restart (Pulsar's ``pulsar.dedup`` cursor)."""
    marks = [s.cursor.mark_delete for s in topic.subscriptions.values() if s.durable]
    if topic.dedup is not None:
        marks.append(topic.dedup_snapshot_position or BEFORE_START)
    return marks


def slowest_mark_delete(topic: Topic) -> Position | None:
    """The durable cursor furthest behind; None without durable subscriptions (a
    deduplication snapshot alone holds nothing back here)."""
    if not any(s.durable for s in topic.subscriptions.values()):
        return None
    return min(durable_marks(topic))
