"""The broker service: the shell around :class:`~magnetar.core.broker.broker_core.BrokerCore`.

It composes the broker: storage and metadata, core's rules that read them (policies,
access, topic records, schemas), the appends on their way to the disk
(:mod:`.appends`), cursor writes (:mod:`.cursor_persistence`), topic releases
(:mod:`.topic_release`), and loads topics. Everything here runs on the event loop thread
except what can wait on a disk: fsync of appends (the group committer's thread,
reported back with ``call_soon_threadsafe``), cursor writes (the metadata writer's
thread), and the opening of a topic's ledger (a worker thread) and its metadata store
calls (:mod:`.topic_opening`). Core's one timer is armed by
:class:`~magnetar.server.timer_alarm.TimerAlarm`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

from magnetar.core import policies
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.broker.broker_facade import TopicOwners
from magnetar.core.broker.broker_timers import BrokerTimers, PeriodicTask
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.delayed.delayed_delivery import DelayedDelivery, delayed_delivery, uses_buckets
from magnetar.core.errors import BrokerError, ServiceNotReady
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName
from magnetar.core.policies import AppliedPolicies, lifecycle_checks, limits, throttles
from magnetar.core.policies.disk_usage import DiskUsage
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.policies.publish_throttle import PublishBuffer
from magnetar.core.policies.throttles import PublishThrottles
from magnetar.core.positions import Position
from magnetar.core.schemas.topic_schemas import TopicSchemas
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.subscriptions.stored_cursors import restore_subscriptions
from magnetar.core.topics import topic_activity, topic_properties
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.core.topics.topic import Topic
from magnetar.core.topics.topic_records import TopicRecords
from magnetar.security.authentication import AuthenticationService
from magnetar.server import deduplication, delayed_index, property_dedup, topic_lifecycle, topic_opening
from magnetar.server.appends import Appends
from magnetar.server.broker_stats import BrokerStatsRecorder
from magnetar.server.bucket_snapshot_sweep import sweep_orphan_snapshots
from magnetar.server.clock import monotonic_ms, now_ms
from magnetar.server.compaction import TopicCompaction
from magnetar.server.cursor_persistence import CursorPersistence
from magnetar.server.ledger_ids import LedgerIds
from magnetar.server.ledger_lists import LedgerLists
from magnetar.server.long_lived_objects import LongLivedObjects
from magnetar.server.loop_lag import LoopLag
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.server.schemas import SchemaRegistry
from magnetar.server.timer_alarm import TimerAlarm
from magnetar.server.topic_opening import StoredTopic
from magnetar.server.topic_release import TopicRelease
from magnetar.storage.descriptor_budget import DescriptorBudget, default_budget
from magnetar.storage.entry_cache_budget import cache_budget
from magnetar.storage.interfaces import LedgerConfig, ManagedLedger, StorageError
from magnetar.storage.ledger_bucket_snapshot_storage import LedgerBucketSnapshotStorage
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.storage.metadata_stores import SQLITE_FILE, local_store, open_metadata_store
from magnetar.storage.segment_ledger import SegmentLedgerFactory

log = logging.getLogger("magnetar.broker")

#: A non-persistent topic keeps at most one small in-memory ledger of recent entries
#: (Topic drops the older ones as soon as they have been dispatched).
NON_PERSISTENT_LEDGER = LedgerConfig(max_entries_per_ledger=1000, max_size_per_ledger_bytes=16 * 1024 * 1024)
#: a topic load that took this long is logged (a client waits on it with its operation timeout)
SLOW_LOAD_MS = 1000


class PumpedConnection(Protocol):
    """What the broker does with its client connections (the server's ``ServerConnection``)."""

    reading_paused: bool

    def update_reading(self) -> None: ...

    def close(self) -> None: ...


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = open_metadata_store(config, data_dir)
        #: the SQLite store (standalone), whose syncs the broker makes itself; None on ZooKeeper
        self.local_metadata = local_store(self.metadata)
        #: cursor writes, in order, off the event loop (SQLite: a second connection to the store)
        self.writer = MetadataWriter(data_dir / SQLITE_FILE, None if self.local_metadata else self.metadata)
        self.core = BrokerCore(config)
        self.timer = TimerAlarm(self.core.timers)
        self.loop_lag = self.timer.lag = LoopLag(config.loopStallThresholdMillis)
        self.topics: LoadedTopics = self.core.topics
        self.long_lived = LongLivedObjects(self.loaded_objects)
        self.schemas = SchemaRegistry(self.metadata, self.writer)
        #: the rules that read the metadata store: policies in force, access, topic records, schemas
        self.policies = PolicyCache(self.metadata, config)
        self.access = AccessRules(self.metadata, self.policies, config)
        self.records = TopicRecords(self.metadata, self.policies, config, self.topics)
        self.topic_schemas = TopicSchemas(self.schemas, self.policies, config)
        self._producer_names = itertools.count()
        self._ledgers: dict[int, Topic] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._dispatcher_factory = self.core.dispatcher_factory
        ledger_config = LedgerConfig(max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger)
        if config.managedLedgerCacheSizeMB == 0:
            ledger_config = replace(ledger_config, cache_max_entries=0, cache_max_bytes=0)
        if not config.journalRemoveFromPageCache:
            ledger_config = replace(ledger_config, page_cache_window_bytes=None)
        budget = DescriptorBudget(config.openFileLimit or default_budget())
        #: ledger ids, a block reserved ahead on the writer's thread
        self.ledger_ids = LedgerIds(self.metadata, self.writer)
        self.ledger_factory = SegmentLedgerFactory(data_dir / "ledgers", self.ledger_ids.next_id, ledger_config,
                                                   budget=budget,
                                                   cache_budget=cache_budget(config.managedLedgerCacheSizeMB))
        self.ledger_config = ledger_config
        self.recorder = BrokerStatsRecorder()
        self.disk = DiskUsage(config.diskUsageThreshold, config.diskUsageWarnThreshold)
        self.release = TopicRelease(self)
        self.appends = Appends(self.topics, self.recorder, self.disk, config.journalSyncData,
                               lambda topic: self.release.unload_in_background(topic, ""))
        self.committer = self.appends.committer
        self.activity = self.appends.activity
        self.timer.busy = self.activity.busy
        self.cursors = CursorPersistence(self.core, self.writer, partial(delayed_index.persist, self),
                                         config.delayedDeliverySharedIndexEnabled)
        self._bucket_storage: LedgerBucketSnapshotStorage | None = None
        self.compaction = TopicCompaction(self)
        #: topics whose load (see load_topic) is under way
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        #: a ledger being opened holds descriptors outside the budget until it is adopted,
        #: so loads in flight are bounded by an eighth of the budget as well
        self._load_slots = asyncio.Semaphore(min(config.maxConcurrentTopicLoadRequest,
                                                 max(1, budget.max_holders // 8)))
        self._dedup_policies_at = -1
        #: the loop connection's write count when the persist tick last asked for a sync
        self._synced_changes = -1
        self.core.ledgers_detached = self.release.remove_detached
        self.publish_throttles = PublishThrottles(config, self.policies)
        self.ready = False
        #: None while authenticationEnabled is false
        self.authentication = AuthenticationService.from_config(config)
        self.addresses = BrokerAddresses(config)
        #: client connections, and how many each address holds (``maxConnectionsPerIp``)
        self.connections: set[PumpedConnection] = set()
        self._connections_per_ip: collections.Counter[str] = collections.Counter()
        self.publish_buffer = PublishBuffer(config.publish_buffer_bytes)
        #: handlers that take the place of core's for some commands (a cluster's broker's)
        self.cluster_handlers: dict[int, Callable[..., None]] = {}
        #: who serves which topic among a cluster's brokers; None on a standalone broker
        self.cluster: TopicOwners | None = None
        #: a cluster's broker: its topics' ledger lists in the metadata store, through which
        #: a topic is taken over (fencing its previous writer) before it is served
        self.ledger_lists: LedgerLists | None = None
        #: topics being handed to another broker -> its service URLs (plain, TLS), told to
        #: their clients as they are closed so they reconnect there without a lookup
        self.successors: dict[str, tuple[str | None, str | None]] = {}
        self.started_at = now_ms()
        self._ensure_defaults()

    # -- start-up --------------------------------------------------------------
    def _ensure_defaults(self) -> None:
        if self.local_metadata is None:
            return  # a cluster's records are created by initialize-cluster-metadata
        cluster = self.config.clusterName
        if self.metadata.get_cluster(cluster) is None:
            urls = self.addresses
            data = {"serviceUrl": urls.web_url, "brokerServiceUrl": urls.broker_url}
            if urls.broker_url_tls is not None:
                data["brokerServiceUrlTls"] = urls.broker_url_tls
            if urls.web_url_tls is not None:
                data["serviceUrlTls"] = urls.web_url_tls
            self.metadata.create_cluster(cluster, data)
        if self.metadata.get_tenant(DEFAULT_TENANT) is None:
            self.metadata.create_tenant(DEFAULT_TENANT, {"adminRoles": [], "allowedClusters": [cluster]})
        namespace = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"
        if self.metadata.get_namespace_policies(namespace) is None:
            self.metadata.create_namespace(namespace, {})
        moved = self.local_metadata.move_legacy_topic_policies()
        if moved:
            log.info("moved the deduplication policy of %d topic records to their topic policies", moved)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = self.appends.loop = self.cursors.loop = self.release.loop = loop
        sweep_orphan_snapshots(self)
        # from here on the loop's commits do not wait for the disk; the writer's syncs make
        # them durable, and what must be durable before it is answered waits for one
        if self.local_metadata is not None:
            self.local_metadata.defer_syncs()
        self.committer.start()
        self.core.start(now_ms(), self._persist_tick)
        self.compaction.start(now_ms())
        self._check_disk(now_ms())
        PeriodicTask(self.core.timers, self.config.diskCheckInterval, self._check_disk).start(now_ms())
        idle_s = self.config.idleTopicUnloadSeconds
        if idle_s > 0:
            check_ms = min(max(idle_s * 500, 100), 60_000)
            self.core.sweep(check_ms, self._unload_idle_topics).start(now_ms())
        topic_lifecycle.start(self, now_ms())
        self.loop_lag.start(self.core.timers, now_ms())
        self.timer.start(loop)
        self.long_lived.install()
        self.ready = True

    def _check_disk(self, now: int) -> None:
        try:
            usage = shutil.disk_usage(self.data_dir)
        except OSError as exc:
            log.warning("cannot read disk usage of %s: %s", self.data_dir, exc)
            return
        # used over used plus what this user may still write, as df counts it
        change = self.disk.update(usage.used, usage.used + usage.free)
        if change is not None:
            (log.error if self.disk.refusing else log.warning)("%s: %s", self.data_dir, change)

    def _unload_idle_topics(self, now: int, topics: Sequence[Topic]) -> None:
        for topic in self.core.idle_topics(now, topics):
            # one the inactive-topic check will delete stays loaded for it: one notion of active
            if not lifecycle_checks.awaits_deletion(self.policies, self.config, topic):
                self.release.unload_in_background(topic, "idle ")

    def loaded_objects(self) -> int:
        """Topics and connections the broker holds: see LongLivedObjects."""
        return len(self.topics) + len(self.connections)

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    # -- topics --------------------------------------------------------------------
    def get_topic(self, name: TopicName, create: bool) -> Topic:
        """The loaded topic (termination's, which the admin API loaded first), else loaded
        now on the event loop; every command and the admin API load through :meth:`load_topic`."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if key in self._loading:  # its ledger is being opened on a worker thread
            raise ServiceNotReady(f"Topic {key} is being loaded; retry shortly")
        self._refuse_released(key)
        self.records.check_record(name, create)
        if self.local_metadata is None:
            # a shared store's reads and writes (and a cluster's takeover, which may wait on
            # a previous writer) wait on the metadata store: not here, on the loop
            self.release.background(self._load_quietly(name, create), f"loading {key}")
            raise ServiceNotReady(f"Topic {key} is being loaded; retry shortly")
        with _load_errors(key):
            ledger = self._open_ledger(name)
        return self._adopt(name, ledger, topic_opening.read_stored_topic(self.metadata, name, now_ms()))

    async def load_topic(self, name: TopicName, create: bool) -> Topic:
        """The loaded topic, else loaded with its ledger opened on a worker thread: opening
        recovers the ledger from its files (index reads, a scan and sync of a segment that was
        being written), disk work that must not hold up the event loop. Loads of one topic
        share one attempt; at most ``maxConcurrentTopicLoadRequest`` run at once."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        loading: asyncio.Future[Topic] = asyncio.get_running_loop().create_future()
        self._loading[key] = loading
        started = monotonic_ms()
        try:
            async with self._load_slots:
                topic = self.topics.get(key) or await self._load(name, create)
        except BaseException as exc:
            loading.set_exception(exc)
            loading.exception()  # retrieved: the loads that shared it see it, and nobody else must
            raise
        finally:
            del self._loading[key]
            if (took := monotonic_ms() - started) >= SLOW_LOAD_MS:
                log.warning("loading %s took %d ms", key, took)
        loading.set_result(topic)
        return topic

    async def _load(self, name: TopicName, create: bool) -> Topic:
        """Its store calls off the loop (:mod:`.topic_opening`): the record checked, the
        ledger opened, its stored state gathered; then adopted on the loop."""
        key = str(name)
        self._refuse_released(key)
        await topic_opening.check_record(self, self.config, name, create)
        loop = asyncio.get_running_loop()
        with _load_errors(key):
            if not name.persistent:  # in memory: nothing to wait for
                ledger: ManagedLedger = self._open_ledger(name)
            elif self.ledger_lists is not None:  # a cluster's: taken over first (docs/cluster.md, rule T)
                ledger = await self.ledger_lists.open(name)
            else:
                await self.ledger_ids.at_hand()
                ledger = await loop.run_in_executor(None, self._open_ledger, name, self.ledger_ids.next_id())
        try:
            stored = await topic_opening.stored_topic(self, name)
            self._refuse_released(key)
            if self.cluster is not None and not self.cluster.serves(name):
                # its bundle was handed over while the topic loaded, after the hand-over had
                # listed the loaded topics: served here, it would have two writers
                raise ServiceNotReady(f"Namespace bundle for topic {key} was unloaded while the topic loaded; "
                                      "please redo the lookup")
        except BaseException:
            await loop.run_in_executor(None, ledger.close)
            raise
        return self._adopt(name, ledger, stored)

    async def _load_quietly(self, name: TopicName, create: bool) -> None:
        """A load started for a request that was answered "retry": its failure is the retry's."""
        try:
            await self.load_topic(name, create)
        except BrokerError as exc:
            log.info("loading %s: %s", name, exc)

    def _refuse_released(self, key: str) -> None:
        """Not while the topic is being released (unloaded or deleted)."""
        if key in self.release.unloading:
            raise ServiceNotReady(f"Topic {key} is being unloaded or deleted; retry shortly")

    def _open_ledger(self, name: TopicName, first_ledger_id: int | None = None) -> ManagedLedger:
        """The topic's ledger; on any thread when ``first_ledger_id`` was taken on the loop
        (ledger ids are handed out there)."""
        if not name.persistent:
            return MemoryLedger(str(name), self.ledger_ids.next_id, NON_PERSISTENT_LEDGER)
        return self.ledger_factory.open(str(name), first_ledger_id)

    def _adopt(self, name: TopicName, ledger: ManagedLedger, stored: StoredTopic) -> Topic:
        if name.persistent:
            if (budget := self.ledger_factory.budget) is not None:
                budget.enforce(keep=ledger)  # opened on a worker thread, which only registers
            # its new segment file and directory entry are made durable now, which also
            # gives back the descriptors the sync holds for them
            self.committer.mark_dirty(ledger)
        topic = self._open_topic(name, ledger, stored)
        self.core.adopt(topic)
        return topic

    def _open_topic(self, name: TopicName, ledger: ManagedLedger, stored: StoredTopic) -> Topic:
        """The topic from its ``stored`` state, with no store call of its own."""
        topic = Topic(name, ledger, self.config, dispatcher_factory=self._dispatcher_factory)
        topic.delayed = self.delayed_delivery_for(name)
        topic_properties.restore(topic, stored.properties, now_ms())  # its creation time is recorded
        restore_subscriptions(topic, stored.cursors)
        self.compaction.restore(topic)
        self.apply_policies(topic, now_ms(), stored)
        for sub in topic.subscriptions.values():
            topic.delayed.recover(sub, now_ms())
        delayed_index.recover(self, topic, now_ms(), stored.shared_index)
        return topic

    def apply_policies(self, topic: Topic, now: int, stored: StoredTopic | None = None) -> None:
        """Bring a loaded topic in line with its policies (topic, namespace, broker); a
        loading topic's snapshots come from its ``stored`` state."""
        if deduplication.refresh(self, topic, now, stored):
            self.release.background(deduplication.enable_from_store(self, topic, now),
                                    f"enabling deduplication of {topic.name}")
        if property_dedup.refresh(self, topic, stored):
            self.release.background(property_dedup.refresh_from_store(self, topic),
                                    f"property deduplication of {topic.name}")
        self.publish_throttles.apply(topic)
        self.apply_dispatch_rates(topic)
        self.apply_delayed_tick(topic)
        topic.apply_policies(self.policies.resolve(AppliedPolicies.resolve, topic.name), now)

    def apply_policies_or_log(self, topic: Topic, now: int) -> None:
        """:meth:`apply_policies` for one of many topics: a topic that cannot follow logs
        why and keeps what it had, and the others still follow."""
        try:
            self.apply_policies(topic, now)
        except Exception:
            log.exception("policies of %s could not be applied; it keeps its previous ones", topic.name)

    def policies_changed(self, name: TopicName | str) -> None:
        """A topic's (TopicName) or a namespace's (str) policies were written: the loaded
        topics they cover follow at once, not at the next periodic refresh."""
        now = now_ms()
        for topic in list(self.topics.values()):
            covered = topic.name.namespace_name == name if isinstance(name, str) \
                else topic.name.partitioned_topic == name.partitioned_topic
            if covered:
                self.apply_policies_or_log(topic, now)

    def apply_dispatch_rates(self, topic: Topic) -> None:
        throttles.apply_dispatch_rates(topic, self.policies, self.config, self.core.timers.wake_up)

    def refresh_policies(self) -> None:
        """Apply run-time policy changes and store due dedup snapshots. Policies change only
        through the metadata store: while it has not changed, there is nothing to apply (and
        reading every loaded topic's policy each second would hold up the event loop)."""
        now = now_ms()
        if self._dedup_policies_at != self.metadata.policy_changes:
            self._dedup_policies_at = self.metadata.policy_changes
            for topic in list(self.topics.values()):
                self.apply_policies_or_log(topic, now)
        deduplication.store_snapshots(self, now)
        property_dedup.store_snapshots(self)

    def delayed_delivery_for(self, name: TopicName) -> DelayedDelivery:
        storage = self.bucket_snapshot_storage if uses_buckets(self.config) else None
        made = delayed_delivery(self.config, storage, enabled=partial(self._delayed_delivery_active, name),
                                latency_clock_ms=monotonic_ms)
        made.tick_time_ms = self.policies.resolve(policies.delayed_delivery_tick_ms, name)
        return made

    def _delayed_delivery_active(self, name: TopicName) -> bool:
        return self.policies.resolve(policies.delayed_delivery_active, name)

    def apply_delayed_tick(self, topic: Topic) -> None:
        if topic.delayed is not None:
            tick = self.policies.resolve(policies.delayed_delivery_tick_ms, topic.name)
            topic.delayed.retick(tick, topic.subscriptions.values())

    @property
    def bucket_snapshot_storage(self) -> LedgerBucketSnapshotStorage:
        storage = self._bucket_storage
        if storage is None:
            storage = self._bucket_storage = LedgerBucketSnapshotStorage(
                self.data_dir / "buckets", self.metadata, background=self._bucket_work,
                ledger_ids=self.ledger_ids.next_id)
        return storage

    def _bucket_work(self, work: Callable[[BrokerMetadataStore], None]) -> object:
        """Bucket snapshot writes and deletes, on the metadata writer's thread once the broker
        runs (before, at start-up, the sweep may do them here)."""
        if self.loop is None:
            work(self.metadata)
            return None
        return self.writer.submit(work)

    def _persist_tick(self, now: int) -> None:
        """The cursor-persist deadline: changed cursors, due dedup snapshots, policy changes,
        and a sync of what the loop's metadata connection committed that nobody waited for
        (topics created or deleted by the broker itself)."""
        self.cursors.persist_cursors()
        self.refresh_policies()
        changes = self.metadata.changes
        if changes != self._synced_changes:
            self._synced_changes = changes
            self.writer.barrier()

    # -- shutdown -----------------------------------------------------------------------------
    async def close(self) -> None:
        self.ready = False
        if self._loading:  # topics whose ledger is being opened join the others before they close
            await asyncio.wait([asyncio.shield(f) for f in self._loading.values()])
        self.timer.stop()
        self.loop_lag.stop()
        self.long_lived.uninstall()
        for topic in list(self.topics.values()):
            topic_activity.close_all_clients(topic)
        await asyncio.get_running_loop().run_in_executor(None, self.committer.flush)
        if self.loop is not None:
            synced = [(t.ledger, last) for t in self.topics.values() if (last := t.ledger.last_position()) is not None]
            self.appends.on_synced(synced)
        await asyncio.wrap_future(self.cursors.persist_cursors(force=True))
        await self.release.removals_done()
        property_dedup.store_snapshots(self)
        self.committer.stop()
        for topic in self.topics.values():
            topic.ledger.close()
            self.compaction.release(topic)
        await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
        self.metadata.close()
        self.activity.close()

    @property
    def metadata_changes(self) -> int:
        return self.metadata.changes

    def metadata_durable(self) -> concurrent.futures.Future[None]:
        return self.writer.barrier()

    def cursors_durable(self, topic: Topic) -> concurrent.futures.Future[None]:
        return self.cursors.persist_topic_cursors(topic)

    @property
    def timers(self) -> BrokerTimers:
        return self.core.timers

    @staticmethod
    def now_ms() -> int:
        return now_ms()


    def admit_connection(self, ip: str) -> str | None:
        """Count a new connection, or say why it is refused."""
        refusal = limits.connection_refusal(len(self.connections), self._connections_per_ip[ip], self.config)
        if refusal is None:
            self._connections_per_ip[ip] += 1
        return refusal

    def connection_closed(self, ip: str, admitted_at: int) -> None:
        """``admitted_at``: the garbage-collection epoch when it was admitted."""
        self.long_lived.released(born_at=admitted_at)
        self._connections_per_ip[ip] -= 1
        if self._connections_per_ip[ip] <= 0:
            del self._connections_per_ip[ip]

    def resume_publishers(self) -> None:
        """The broker's publish buffer fell back to half: read every paused connection again."""
        for conn in list(self.connections):
            if conn.reading_paused:
                conn.update_reading()

    def ensure_subscription(self, topic: Topic, name: str) -> None:
        if name not in topic.subscriptions:
            from magnetar.core.positions import BEFORE_START
            topic.create_subscription(name, "Exclusive", durable=True, mark_delete=BEFORE_START)
            self.cursors.persist_topic_cursors(topic)

    async def terminate(self, name: TopicName) -> Position:
        """Terminate a loaded persistent topic; its last message id, stored before it is answered."""
        return await topic_lifecycle.terminate(self, name)

    def delete_subscription(self, topic: Topic, name: str) -> None:
        topic.unsubscribe(name, force=True)
        self.cursors.delete_cursor(topic, name)
        delayed_index.persist(self, topic)

@contextmanager
def _load_errors(key: str) -> Iterator[None]:
    """Out of descriptors or disk while loading a topic: that request fails with
    ServiceNotReady, the broker and its other topics go on."""
    try:
        yield
    except (OSError, StorageError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if not isinstance(cause, OSError):
            raise
        log.error("cannot load topic %s: %s", key, exc)
        raise ServiceNotReady(f"Topic {key} could not be loaded: {cause.strerror or cause}") from exc
