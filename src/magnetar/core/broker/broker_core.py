"""The broker's decisions that depend on time, apart from any socket, disk or clock.

``BrokerCore`` owns the loaded topics and the broker's one timer
(:class:`~magnetar.core.broker.broker_timers.BrokerTimers`). The shell hands it the time with
every call; it answers with what to do (cursor records to write) or does it through the
sinks of consumers and producers. The simulation drives the same object, so delayed
ticks, Key_Shared unblocking and cursor-persist decisions are reachable from a seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_timers import MIN_DELAYED_TICK_MS, BrokerTimers, PeriodicTask
from magnetar.core.broker.topic_sweep import TopicSweep, Visit
from magnetar.core.compaction.compacted_topic import COMPACTION_SUBSCRIPTION, backlog_bytes
from magnetar.core.delayed.delayed_delivery import next_delivery_ms
from magnetar.core.dispatchers.base import DispatcherFactory
from magnetar.core.dispatchers.key_shared import with_timers
from magnetar.core.policies import InactiveTopicPolicies, backlog_quota, inactive_topics, message_expiry
from magnetar.core.policies.backlog_quota import BacklogQuotas
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.subscriptions.subscription import Subscription, default_dispatcher
from magnetar.core.topics import topic_activity
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.core.topics.topic import Topic, topic_of

#: The expiry check never runs more often than this, whatever the config says.
MIN_EXPIRY_CHECK_MS = 100


@dataclass(frozen=True)
class CursorWrite:
    """A durable cursor whose state changed since it was last written."""

    topic: str
    subscription: Subscription
    record: CursorRecord

    @property
    def name(self) -> str:
        return self.subscription.name


class BrokerCore:
    def __init__(self, config: BrokerConfig, alarm: Callable[[int], None] | None = None,
                 dispatcher_factory: DispatcherFactory = default_dispatcher) -> None:
        self.config = config
        self.topics = LoadedTopics()
        self.timers = BrokerTimers(alarm)
        self.dispatcher_factory = with_timers(dispatcher_factory, self.timers.wake_up)
        tick_ms = max(config.delayedDeliveryTickTimeMillis, MIN_DELAYED_TICK_MS)
        self.delayed_tick = PeriodicTask(self.timers, tick_ms, self.tick_delayed_delivery)
        rate = config.managedLedgerDefaultMarkDeleteRateLimit
        self.persist_period_ms = max(1, round(1000 / rate)) if rate > 0 else 1000
        self.retention_check = TopicSweep(self.timers, config.retentionCheckIntervalInSeconds * 1000,
                                          self.topics, self.check_retention)
        expiry_ms = max(MIN_EXPIRY_CHECK_MS, round(config.messageExpiryCheckIntervalInMinutes * 60_000))
        self.expiry_check = TopicSweep(self.timers, expiry_ms, self.topics, self.check_message_expiry)
        #: topics whose cursors changed since the last persist, and topics with delayed
        #: trackers: what the once-a-second ticks visit (Topic.on_attention)
        self._cursors_changed: dict[Topic, None] = {}
        self._delayed_topics: dict[Topic, None] = {}
        self._dedup_topics: dict[Topic, None] = {}
        #: told of each topic whose ledgers retention detached: the shell removes their files
        self.ledgers_detached: Callable[[Topic, list[int]], None] = _keep_files

    def start(self, now_ms: int, persist: Callable[[int], int | None]) -> PeriodicTask:
        """Start the periodic owners; ``persist(now)`` writes what changed (the shell's)."""
        self.delayed_tick.start(now_ms)
        self.retention_check.start(now_ms)
        self.expiry_check.start(now_ms)
        task = PeriodicTask(self.timers, self.persist_period_ms, persist)
        task.start(now_ms)
        return task

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline_ms()

    def adopt(self, topic: Topic) -> None:
        """Load ``topic`` into the broker: the periodic ticks learn what it needs from now on."""
        self.topics[str(topic.name)] = topic
        topic.on_attention = self._attention
        if topic.cursors_changed:
            self._cursors_changed[topic] = None
        if topic.delayed is not None and topic.delayed.has_trackers:
            self._delayed_topics[topic] = None
        if topic.dedup is not None or topic.property_dedup is not None:
            self._dedup_topics[topic] = None

    def _attention(self, topic: Topic, what: str) -> None:
        wanting = {"cursors": self._cursors_changed, "delayed": self._delayed_topics, "dedup": self._dedup_topics}
        wanting[what][topic] = None

    def deduplicating_topics(self) -> list[Topic]:
        """Loaded topics with message or business-id deduplication: their snapshots are
        stored once a second (topics that stopped deduplicating are forgotten here)."""
        for topic in [t for t in self._dedup_topics if not self._loaded(t) or
                      (t.dedup is None and t.property_dedup is None)]:
            del self._dedup_topics[topic]
        return list(self._dedup_topics)

    def _loaded(self, topic: Topic) -> bool:
        return self.topics.get(str(topic.name)) is topic

    def sweep(self, period_ms: int, visit: Visit) -> TopicSweep:
        """A periodic check over the loaded topics, a slice per timer ring (not started)."""
        return TopicSweep(self.timers, period_ms, self.topics, visit)

    def _all(self, topics: Iterable[Topic] | None) -> Iterable[Topic]:
        """The topics a check visits: the slice given, else every loaded one (a copy,
        as checks may unload or delete topics)."""
        return list(self.topics.values()) if topics is None else topics

    def on_timer(self, now_ms: int) -> int | None:
        return self.timers.on_timer(now_ms)

    # -- delayed delivery ------------------------------------------------------------
    def tick_delayed_delivery(self, now_ms: int) -> int | None:
        """Dispatch subscriptions whose delayed messages came due; the next due time, if any."""
        soonest: int | None = None
        for topic in list(self._delayed_topics):
            if not self._loaded(topic):
                del self._delayed_topics[topic]  # unloaded or deleted
                continue
            for sub in list(topic.subscriptions.values()):
                due = tick_subscription(sub, now_ms)
                if due is not None and (soonest is None or due < soonest):
                    soonest = due
        return soonest

    # -- loaded topics ---------------------------------------------------------------------
    def idle_topics(self, now_ms: int, topics: Iterable[Topic] | None = None) -> list[Topic]:
        """Persistent topics without clients for ``idleTopicUnloadSeconds``: the shell
        unloads them (cursors stored, files closed) so that open files and memory follow
        the topics in use, not every topic ever touched. They load again on next use."""
        idle_ms = self.config.idleTopicUnloadSeconds * 1000
        if idle_ms <= 0:
            return []
        return [t for t in self._all(topics) if t.name.persistent and topic_activity.idle_for(t, now_ms) >= idle_ms]

    # -- data lifecycle ---------------------------------------------------------------------
    def check_backlog_quotas(self, now_ms: int, quotas_of: Callable[[Topic], BacklogQuotas],
                             topics: Iterable[Topic] | None = None) -> None:
        """The ``backlogQuotaCheckIntervalInSeconds`` check: apply each persistent topic's
        quota policy where its backlog exceeds a quota."""
        for topic in self._all(topics):
            if topic.name.persistent and not topic.fenced:
                backlog_quota.enforce(topic, quotas_of(topic), now_ms)

    def inactive_topics(self, now_ms: int,
                        policies_of: Callable[[Topic], tuple[InactiveTopicPolicies, int]],
                        topics: Iterable[Topic] | None = None) -> list[Topic]:
        """The ``brokerDeleteInactiveTopicsFrequencySeconds`` check: the topics to delete
        now; ``policies_of`` gives a topic's inactive-topic policy and retention minutes."""
        due = []
        for topic in self._all(topics):
            policies, retention_minutes = policies_of(topic)
            if not topic.fenced and inactive_topics.due_for_deletion(topic, policies, retention_minutes, now_ms):
                due.append(topic)
        return due

    def expired_subscriptions(self, now_ms: int,
                              minutes_of: Callable[[Topic], float],
                              topics: Iterable[Topic] | None = None) -> list[tuple[Topic, Subscription]]:
        """The ``subscriptionExpiryCheckIntervalInMinutes`` check: subscriptions to delete."""
        return [(topic, sub) for topic in self._all(topics) if topic.name.persistent
                for sub in inactive_topics.expired_subscriptions(topic, minutes_of(topic), now_ms)]

    # -- storage ------------------------------------------------------------------------
    def on_persisted(self, topic_name: str, upto: Position, now_ms: int) -> bool:
        """Entries up to ``upto`` are durable: receipts, then dispatch. False if the
        topic is no longer loaded."""
        topic = self.topics.get(topic_name)
        if topic is None:
            return False
        topic.on_persisted(upto, now_ms)
        return True

    # -- cursors --------------------------------------------------------------------------
    def cursor_writes(self, topics: Iterable[Topic] | None = None, *, force: bool = False,
                      now_ms: int = 0) -> list[CursorWrite]:
        """The durable cursors to write: those changed since their last write (all with
        ``force``). Each is marked written; :meth:`cursor_write_failed` undoes that."""
        writes: list[CursorWrite] = []
        if topics is None and not force:
            topics = [topic for topic in self._cursors_changed if self._loaded(topic)]
            self._cursors_changed = {}
        for topic in self.topics.values() if topics is None else topics:
            if not (topic.cursors_changed or force) or not topic.name.persistent:
                continue
            topic.cursors_changed = False
            for sub in topic.subscriptions.values():
                if not sub.durable or (sub.cursor.version == sub.persisted_version and not force):
                    continue
                cursor = sub.cursor
                writes.append(CursorWrite(str(topic.name), sub, CursorRecord(
                    mark_delete=cursor.mark_delete, individually_deleted=cursor.deleted_ranges(),
                    properties=dict(cursor.properties), last_active_ms=now_ms)))
                sub.persisted_version = cursor.version
        return writes

    @staticmethod
    def cursor_write_failed(writes: Iterable[CursorWrite]) -> None:
        """The writes did not reach the store: write those cursors again next time."""
        for write in writes:
            write.subscription.persisted_version = -1
            topic_of(write.subscription).cursor_changed()

    # -- compaction ------------------------------------------------------------------------
    def topics_to_compact(self, topics: Iterable[Topic] | None = None) -> list[Topic]:
        """Topics whose backlog since their last compaction passed their compaction
        threshold (Pulsar's ``PersistentTopic.checkCompaction``), none already compacting."""
        due = []
        for topic in self._all(topics):
            threshold = topic.applied.compaction_threshold_bytes
            if threshold <= 0 or not topic.name.persistent or topic.compacted.state == "RUNNING":
                continue
            sub = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
            estimate = topic.ledger.total_size_bytes() if sub is None \
                else backlog_bytes(topic.ledger.ledgers(), sub.cursor.mark_delete)
            if estimate > threshold:
                due.append(topic)
        return due

    # -- data lifecycle -----------------------------------------------------------------
    def check_retention(self, now_ms: int, topics: Iterable[Topic] | None = None) -> None:
        """Every ``retentionCheckIntervalInSeconds``: ledgers past retention are detached."""
        for topic in self._all(topics):
            if topic.name.persistent and not topic.fenced:
                detached = topic.apply_retention(now_ms)
                if detached:
                    self.ledgers_detached(topic, detached)

    def check_message_expiry(self, now_ms: int, topics: Iterable[Topic] | None = None) -> None:
        """Every ``messageExpiryCheckIntervalInMinutes``: expire on every subscription of
        every topic with a message TTL."""
        for topic in self._all(topics):
            ttl_s = topic.applied.message_ttl_s
            if ttl_s > 0 and topic.name.persistent and not topic.fenced:
                for sub in list(topic.subscriptions.values()):
                    if message_expiry.expire(sub, ttl_s, now_ms):
                        sub.dispatcher.begin_round()
                        sub.dispatcher.dispatch(now_ms)


def _keep_files(topic: Topic, detached: list[int]) -> None:
    """Without a shell (tests, the simulation) detached data is left where it is."""


def tick_subscription(sub: Subscription, now_ms: int) -> int | None:
    """Dispatch one subscription's due delayed messages; when it next wants a tick."""
    tracker = sub.delayed_tracker
    if tracker is None or not any(c.can_take() for c in sub.consumers):
        # nothing can go out until a consumer can take it, and a flow or an ack
        # dispatches by itself: no timer, or due messages would spin it every ms
        return None
    dispatcher = sub.dispatcher
    if dispatcher.read_more or tracker.has_message_available(now_ms):
        dispatcher.begin_round()
        dispatcher.dispatch(now_ms)
    if dispatcher.read_more:
        return now_ms
    return next_delivery_ms(sub)
