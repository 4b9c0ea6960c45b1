"""The broker shell's twin for the command-level simulation: :class:`SimBroker`
implements :class:`~magnetar.core.broker.command_shell.CommandShell` over the real core.

What it holds is what the broker service holds (server/broker_service.py): core's
``BrokerCore`` and its one timer (driven by the simulated clock), the metadata store
(SQLite in memory) read by core's policy cache, access rules, topic records and topic
schemas, built as the service builds them. What the service hands to other threads
becomes a step the schedule takes when it chooses:

* metadata and cursor durability: a :class:`~.sim_storage.Completion` per request, done
  in submission order (the metadata writer's one thread); a cursor record reaches the
  store only when its write completes, so a crash loses the writes still pending;
* topic loads: queued, finished later (the worker thread that opens a ledger), one
  attempt shared by every waiting command;
* appends: written (or failed, taken back) when the schedule flushes a ledger, synced
  when it syncs one, and reported to the topic (``on_persisted``) later still, a
  ledger's reports in order; a failed sync errs the pending sends and unloads the topic,
  as ``server/appends.py`` does.

A crash keeps the metadata store (cursor records included, as written) and each
ledger's synced entries; a new ``SimBroker`` over the same :class:`SimStorage` is the
restarted broker.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from magnetar.core import policies as policy_rules
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore, CursorWrite
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.due_snapshots import DueSnapshot, due_snapshots
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.dedup.topic_dedup import DEDUP_CURSOR, recovered
from magnetar.core.delayed.delayed_delivery import DelayedDelivery
from magnetar.core.errors import ServiceNotReady
from magnetar.core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName
from magnetar.core.policies import AppliedPolicies
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.schemas.schema_data import SchemaData
from magnetar.core.schemas.topic_schemas import TopicSchemas
from magnetar.core.schemas.versions import StoredVersion
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.subscriptions.stored_cursors import restore_subscriptions
from magnetar.core.topics import topic_activity
from magnetar.core.topics.topic import Topic
from magnetar.core.topics.topic_records import TopicRecords
from magnetar.storage.interfaces import AppendFailed, LedgerConfig
from magnetar.storage.metadata_store import MemoryMetadataStore
from magnetar.testing.sim.sim_storage import Completion, SimLedger, SimLedgers


class MemorySchemas:
    """Schema versions per topic (the registry's history), kept across restarts."""

    def __init__(self) -> None:
        self._versions: dict[str, list[StoredVersion]] = {}

    def history(self, name: TopicName) -> list[StoredVersion]:
        return self._versions.setdefault(str(name), [])

    def append(self, name: TopicName, schema: SchemaData, now_ms: int, *, deleted: bool = False) -> StoredVersion:
        versions = self.history(name)
        stored = StoredVersion(len(versions), schema, now_ms, deleted)
        versions.append(stored)
        return stored

    def delete_all(self, name: TopicName) -> None:
        self._versions.pop(str(name), None)


@dataclass
class SimStorage:
    """What outlives a broker crash: the metadata store, the ledgers, the schemas."""

    config: BrokerConfig
    clock_ms: Callable[[], int]
    ledger_config: LedgerConfig
    metadata: MemoryMetadataStore = field(default_factory=MemoryMetadataStore)
    schemas: MemorySchemas = field(default_factory=MemorySchemas)
    ledgers: SimLedgers = field(init=False)

    def __post_init__(self) -> None:
        self.ledgers = SimLedgers(self.ledger_config, self.clock_ms)
        cluster = self.config.clusterName
        self.metadata.create_cluster(cluster, {"serviceUrl": "http://sim:8080"})
        self.metadata.create_tenant(DEFAULT_TENANT, {"adminRoles": [], "allowedClusters": [cluster]})
        self.metadata.create_namespace(f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}", {})


@dataclass
class PendingLoad:
    name: TopicName
    create: bool
    waiting: list[Callable[[Topic | None, BaseException | None], None]] = field(default_factory=list)


class SimBroker:
    """The broker as core's commands see it (CommandShell), and the storage steps the
    schedule takes."""

    def __init__(self, storage: SimStorage, dedup_entries_interval: int = 1000) -> None:
        config = storage.config
        self.config = config
        self.storage = storage
        self.clock_ms = storage.clock_ms
        self.metadata = storage.metadata
        self.core = BrokerCore(config)
        self.topics = self.core.topics
        self.policies = PolicyCache(self.metadata, config)
        self.access = AccessRules(self.metadata, self.policies, config)
        self.records = TopicRecords(self.metadata, self.policies, config, self.topics)
        self.topic_schemas = TopicSchemas(storage.schemas, self.policies, config)
        self.addresses = BrokerAddresses(config)
        self.dedup_config = DeduplicationConfig(entries_interval=dedup_entries_interval)
        self.ready = True
        self._producer_names = itertools.count()
        #: metadata and cursor writes, done in submission order
        self.metadata_queue: deque[Completion] = deque()
        self.loads: dict[str, PendingLoad] = {}
        #: topics whose release waits for their cursors to be written
        self.unloading: set[str] = set()
        #: syncs done whose report has not reached the topic yet, per ledger, in order
        self.sync_reports: dict[str, deque[tuple[SimLedger, Position]]] = {}
        self.core.start(self.clock_ms(), self._persist_tick)

    # -- CommandShell ------------------------------------------------------------------
    @property
    def schemas(self) -> MemorySchemas:
        return self.storage.schemas

    @property
    def metadata_changes(self) -> int:
        return self.metadata.changes

    def metadata_durable(self) -> Completion:
        return self._queue(Completion())

    def cursors_durable(self, topic: Topic) -> Completion:
        return self._write_cursors(self.core.cursor_writes([topic], now_ms=self.clock_ms()))

    def now_ms(self) -> int:
        return self.clock_ms()

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    def ensure_subscription(self, topic: Topic, name: str) -> None:
        if name not in topic.subscriptions:
            topic.create_subscription(name, "Exclusive", durable=True, mark_delete=BEFORE_START)
            self.cursors_durable(topic)

    def delete_subscription(self, topic: Topic, name: str) -> None:
        topic.unsubscribe(name, force=True)
        key = str(topic.name)
        def delete() -> None:
            self.metadata.delete_cursor(key, name)
        self._queue(Completion(delete))

    def apply_dispatch_rates(self, topic: Topic) -> None:
        """No dispatch rate is configured in the simulation: nothing to throttle."""

    # -- metadata writes ---------------------------------------------------------------------
    def _queue(self, completion: Completion) -> Completion:
        self.metadata_queue.append(completion)
        return completion

    def _write_cursors(self, writes: list[CursorWrite]) -> Completion:
        records = [(w.topic, w.name, w.record) for w in writes]
        return self._queue(Completion(lambda: self.metadata.put_cursors(records)))

    def complete_metadata(self, count: int) -> int:
        """The writer's thread finishes the next ``count`` writes; how many it did."""
        done = 0
        while self.metadata_queue and done < count:
            self.metadata_queue.popleft().complete()
            done += 1
        return done

    def _persist_tick(self, now: int) -> None:
        """The broker service's cursor-persist deadline: changed cursors and due dedup snapshots."""
        self._write_cursors(self.core.cursor_writes(now_ms=now))
        for due in due_snapshots(self.core.deduplicating_topics(), now):
            self._queue(Completion(partial(self._snapshot_stored, due, now)))

    def _snapshot_stored(self, due: DueSnapshot, now: int) -> None:
        """The dedup snapshot is in the store (server/deduplication.py ``_snapshot_written``)."""
        self.metadata.put_cursor(str(due.topic.name), DEDUP_CURSOR, due.record)
        due.stored(now)

    # -- topic loads --------------------------------------------------------------------------
    def request_load(self, name: TopicName, create: bool,
                     then: Callable[[Topic | None, BaseException | None], None]) -> None:
        """Load ``name`` later (:meth:`finish_load`); loads of one topic share one attempt."""
        key = str(name)
        pending = self.loads.get(key)
        if pending is None:
            pending = self.loads[key] = PendingLoad(name, create)
        pending.waiting.append(then)

    def finish_load(self, key: str) -> None:
        pending = self.loads.pop(key)
        topic: Topic | None = None
        failure: BaseException | None = None
        try:
            topic = self.topics.get(key) or self._load(pending.name, pending.create)
        except Exception as exc:
            failure = exc
        for then in pending.waiting:
            then(topic, failure)

    def _load(self, name: TopicName, create: bool) -> Topic:
        key = str(name)
        if key in self.unloading:
            raise ServiceNotReady(f"Topic {key} is being unloaded or deleted; retry shortly")
        self.records.check_record(name, create)
        ledger = self.storage.ledgers.open_ledger(key)
        topic = Topic(name, ledger, self.config, dispatcher_factory=self.core.dispatcher_factory)
        topic.delayed = DelayedDelivery(self.config)
        now = self.clock_ms()
        restore_subscriptions(topic, self.metadata.list_cursors(key))
        if self.policies.resolve(policy_rules.deduplication_enabled, name):
            topic.dedup = self._recovered_dedup(topic, now)
        topic.apply_policies(self.policies.resolve(AppliedPolicies.resolve, name), now)
        self.core.adopt(topic)
        return topic

    def _recovered_dedup(self, topic: Topic, now: int) -> MessageDeduplication:
        """The snapshot in the dedup cursor, then every entry after it (core/dedup/topic_dedup.py)."""
        return recovered(topic, self.dedup_config, self.metadata.get_cursor(str(topic.name), DEDUP_CURSOR), now)

    def unload(self, topic: Topic) -> None:
        """Release a topic (server/topic_release.py): clients closed, cursors written, then
        the ledger closed; loads wait until the cursors are durable."""
        key = str(topic.name)
        if self.topics.get(key) is not topic:
            return
        self.unloading.add(key)
        topic.fenced = True
        topic_activity.close_all_clients(topic)
        del self.topics[key]
        self.sync_reports.pop(key, None)

        def released() -> None:
            topic.ledger.close()
            self.unloading.discard(key)
        self._write_cursors(self.core.cursor_writes([topic], force=True, now_ms=self.clock_ms())) \
            .add_done_callback(lambda _: released())

    # -- appends ------------------------------------------------------------------------------
    def ledger_of(self, key: str) -> SimLedger | None:
        topic = self.topics.get(key)
        return topic.ledger if topic is not None and isinstance(topic.ledger, SimLedger) else None

    def write(self, key: str, fail: bool = False) -> bool:
        """Write a topic's buffered appends (server/appends.py ``_write``), or fail to."""
        topic, ledger = self.topics.get(key), self.ledger_of(key)
        if topic is None or ledger is None or ledger.unwritten_from is None:
            return False
        ledger.fail_next_flush = fail
        try:
            ledger.flush()
        except AppendFailed as exc:
            topic.appends_taken_back(exc.position, exc.reason)
        return True

    def sync(self, key: str, fail: bool = False) -> bool:
        """The group committer syncs a ledger: a report on its way, or the failure's effects."""
        topic, ledger = self.topics.get(key), self.ledger_of(key)
        if topic is None or ledger is None or ledger.written() is None or ledger.written() == ledger.synced():
            return False
        if fail:
            self.deliver_reports(key)  # the reports of earlier syncs come first
            if topic.pending_receipts:
                topic.appends_taken_back(topic.pending_receipts[0].pos, "the write could not be made durable")
            self.unload(topic)
            return True
        upto = ledger.sync()
        if upto is not None:
            self.sync_reports.setdefault(key, deque()).append((ledger, upto))
        return True

    def deliver_reports(self, key: str, count: int | None = None) -> bool:
        """Sync reports reach the event loop: receipts, then dispatch."""
        reports = self.sync_reports.get(key)
        if not reports:
            return False
        delivered = 0
        while reports and (count is None or delivered < count):
            ledger, upto = reports.popleft()
            topic = self.topics.get(key)
            if topic is not None and topic.ledger is ledger:
                topic.on_persisted(upto, self.clock_ms())
            delivered += 1
        return True

    # -- the timer ------------------------------------------------------------------------------
    def fire_timers(self) -> None:
        """The broker's one timer, as the shell runs it: whatever came due by now."""
        now = self.clock_ms()
        due = self.core.next_deadline_ms()
        if due is not None and due <= now:
            self.core.on_timer(now)
            failures, self.core.timers.failures = self.core.timers.failures, []
            if failures:
                raise failures[0][1]
