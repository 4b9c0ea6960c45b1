"""The broker service: the shell around :class:`~magnetar.core.broker.BrokerCore`.

It owns storage and metadata and executes what core decides. Everything here runs on
the event loop thread except what can wait on a disk: fsync of appends (the group
committer's thread, reported back with ``call_soon_threadsafe``) and cursor writes
(the metadata writer's thread). Core's one timer is armed by :class:`BrokerTimer`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import shutil
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from magnetar.config import BrokerConfig
from magnetar.core import authorization, cursor_moves, limits, message_expiry, policies, publish
from magnetar.core.authorization import AccessContext, AuthPolicies, Operation
from magnetar.core.broker import BrokerCore, CursorWrite
from magnetar.core.broker_timers import PeriodicTask
from magnetar.core.dedup.message_deduplication import DedupStatus
from magnetar.core.delayed_delivery import SHARED_INDEX_CURSOR, DelayedDelivery, delayed_delivery, uses_buckets
from magnetar.core.disk_usage import DiskUsage
from magnetar.core.dispatch_throttle import DispatchThrottle
from magnetar.core.entry import EntryInfo
from magnetar.core.errors import MetadataError, NotAllowed, PersistenceError, ServiceNotReady, TopicNotFound
from magnetar.core.listeners import internal_listener, listener_for, parse_listeners
from magnetar.core.names import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName
from magnetar.core.policies import AppliedPolicies, Policies, TopicPolicies
from magnetar.core.positions import Position
from magnetar.core.producer import Producer
from magnetar.core.publish_throttle import PublishBuffer
from magnetar.core.rate_limit import RateLimiter
from magnetar.core.schemas import versions as schema_versions
from magnetar.core.schemas.schema_data import SchemaCompatibilityStrategy, SchemaData
from magnetar.core.subscription import Subscription
from magnetar.core.subscription_view import EntrySource
from magnetar.core.topic import Send, Topic
from magnetar.security.authentication import AuthenticationService
from magnetar.server import deduplication, delayed_index, property_dedup, topic_lifecycle
from magnetar.server.broker_stats import BrokerStatsRecorder
from magnetar.server.broker_timer import BrokerTimer
from magnetar.server.bucket_snapshot_sweep import sweep_orphan_snapshots
from magnetar.server.clock import monotonic_ms, now_ms
from magnetar.server.compaction import TopicCompaction
from magnetar.server.deduplication import DEDUP_CURSOR
from magnetar.server.ledger_ids import LedgerIds
from magnetar.server.long_lived_objects import LongLivedObjects
from magnetar.server.loop_activity import LoopActivity
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.server.schemas import SchemaRegistry, encode_version
from magnetar.storage.descriptor_budget import DescriptorBudget, default_budget
from magnetar.storage.entry_cache_budget import cache_budget
from magnetar.storage.group_commit import GroupCommitter
from magnetar.storage.interfaces import AppendFailed, LedgerClosed, LedgerConfig, ManagedLedger, StorageError
from magnetar.storage.ledger_bucket_snapshot_storage import LedgerBucketSnapshotStorage
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.segment_ledger import SegmentLedgerFactory

log = logging.getLogger("magnetar.broker")

#: A non-persistent topic keeps at most one small in-memory ledger of recent entries
#: (Topic drops the older ones as soon as they have been dispatched).
NON_PERSISTENT_LEDGER = LedgerConfig(max_entries_per_ledger=1000, max_size_per_ledger_bytes=16 * 1024 * 1024)


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(data_dir / "metadata.db")
        #: cursor writes, in order, off the event loop (a second connection to the store)
        self.writer = MetadataWriter(data_dir / "metadata.db")
        self.core = BrokerCore(config)
        self.timer = BrokerTimer(self.core.timers)
        self.topics: dict[str, Topic] = self.core.topics
        self.long_lived = LongLivedObjects(self.loaded_objects)
        self.schemas = SchemaRegistry(self.metadata, self.writer)
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
        self.committer = GroupCommitter(self._on_synced_from_thread, sync_enabled=config.journalSyncData,
                                        on_error=self._on_sync_error_from_thread)
        self.recorder = BrokerStatsRecorder()
        self.activity = LoopActivity(self.committer, lambda: bool(self._unflushed))
        #: topics with appends not yet written (an ordered set): written once per loop turn
        self._unflushed: dict[Topic, None] = {}
        #: namespace -> its policies, and topic -> its own policies, valid while the store's
        #: policy change count is _policies_at
        self._policies: dict[str, Policies | None] = {}
        self._topic_policies: dict[str, TopicPolicies] = {}
        self._policies_at = -1
        self.committer.on_sync_time = lambda ledger, seconds: self.recorder.ledger_synced(ledger.name, seconds)
        self._bucket_storage: LedgerBucketSnapshotStorage | None = None
        self.compaction = TopicCompaction(self)
        #: topics being unloaded or deleted: not reopened until that finishes
        self.unloading: set[str] = set()
        #: topics whose load (see load_topic) is under way
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        #: a ledger being opened holds descriptors outside the budget until it is adopted,
        #: so loads in flight are bounded by an eighth of the budget as well
        self._load_slots = asyncio.Semaphore(min(config.maxConcurrentTopicLoadRequest,
                                                 max(1, budget.max_holders // 8)))
        self._tasks: set[asyncio.Task[None]] = set()
        self._dedup_policies_at = -1
        #: the loop connection's write count when the persist tick last asked for a sync
        self._synced_changes = -1
        #: topic -> the removal of its detached ledgers' files, while one runs
        self._removals: dict[str, asyncio.Future[None]] = {}
        self.core.ledgers_detached = self._remove_detached
        self.broker_publish_limiter = RateLimiter(config.brokerPublisherThrottlingMaxMessageRate,
                                                         config.brokerPublisherThrottlingMaxByteRate)
        self.disk = DiskUsage(config.diskUsageThreshold, config.diskUsageWarnThreshold)
        self._last_append_error: tuple[str, float] | None = None
        self.ready = False
        #: None while authenticationEnabled is false
        self.authentication = AuthenticationService.from_config(config)
        self.listeners = parse_listeners(config.advertisedListeners)
        self.internal_listener = internal_listener(self.listeners, config.internalListenerName)
        self._ensure_defaults()

    # -- start-up --------------------------------------------------------------
    def _ensure_defaults(self) -> None:
        cluster = self.config.clusterName
        if self.metadata.get_cluster(cluster) is None:
            data = {"serviceUrl": self.web_url, "brokerServiceUrl": self.broker_url}
            if self.broker_url_tls is not None:
                data["brokerServiceUrlTls"] = self.broker_url_tls
            if self.web_url_tls is not None:
                data["serviceUrlTls"] = self.web_url_tls
            self.metadata.create_cluster(cluster, data)
        if self.metadata.get_tenant(DEFAULT_TENANT) is None:
            self.metadata.create_tenant(DEFAULT_TENANT, {"adminRoles": [], "allowedClusters": [cluster]})
        namespace = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"
        if self.metadata.get_namespace_policies(namespace) is None:
            self.metadata.create_namespace(namespace, {})
        moved = self.metadata.move_legacy_topic_policies()
        if moved:
            log.info("moved the deduplication policy of %d topic records to their topic policies", moved)

    @property
    def broker_url(self) -> str:
        """The plain binary URL; the TLS one when the plain port is off."""
        if self.config.brokerServicePort is None:
            return self.broker_url_tls or ""
        return f"pulsar://{self.config.advertisedAddress}:{self.config.brokerServicePort}"

    def lookup_urls(self, listener_name: str | None) -> tuple[str, str | None]:
        """(plain, TLS) binary URLs for a lookup: the named listener's, else the internal
        listener's when advertisedListeners is set, else advertisedAddress with the ports."""
        if listener_name:
            listener = listener_for(self.listeners, listener_name)
        elif self.internal_listener is not None:
            listener = self.internal_listener
        else:
            return self.broker_url, self.broker_url_tls
        return listener.broker_url or listener.broker_url_tls or "", listener.broker_url_tls

    @property
    def broker_url_tls(self) -> str | None:
        port = self.config.brokerServicePortTls
        return None if port is None else f"pulsar+ssl://{self.config.advertisedAddress}:{port}"

    @property
    def web_url(self) -> str:
        if self.config.webServicePort is None:
            return self.web_url_tls or ""
        return f"http://{self.config.advertisedAddress}:{self.config.webServicePort}"

    @property
    def web_url_tls(self) -> str | None:
        port = self.config.webServicePortTls
        return None if port is None else f"https://{self.config.advertisedAddress}:{port}"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        sweep_orphan_snapshots(self)
        # from here on the loop's commits do not wait for the disk; the writer's syncs make
        # them durable, and what must be durable before it is answered waits for one
        self.metadata.defer_syncs()
        self.committer.start()
        self.core.start(now_ms(), self._persist_tick)
        self.compaction.start(now_ms())
        self._check_disk(now_ms())
        PeriodicTask(self.core.timers, self.config.diskCheckInterval, self._check_disk).start(now_ms())
        idle_s = self.config.idleTopicUnloadSeconds
        if idle_s > 0:
            check_ms = min(max(idle_s * 500, 100), 60_000)
            self.core.sweep(check_ms, self._unload_idle_topics).start(now_ms())
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
            if str(topic.name) not in self.unloading and not topic_lifecycle.awaits_deletion(self, topic):
                self.background(self._release_topic(topic, delete_data=False), f"unloading idle {topic.name}")

    def background(self, work: Coroutine[Any, Any, None], what: str) -> None:
        def logged(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s failed", what, exc_info=task.exception())
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(logged)

    async def _release_topic(self, topic: Topic, delete_data: bool) -> None:
        key = str(topic.name)
        self.unloading.add(key)
        try:
            topic.fenced = True
            topic.close_all_clients()
            self.topics.pop(key, None)
            self.long_lived.released()
            await asyncio.get_running_loop().run_in_executor(None, self.committer.flush)
            if not delete_data:
                await asyncio.wrap_future(self.persist_topic_cursors(topic, force=True))
            await self._finish_removal(topic, delete_data)
            if topic.delayed is not None:
                topic.delayed.release(topic, delete_data)
            # closing syncs and deleting removes a directory: off the event loop
            release = topic.ledger.delete if delete_data else topic.ledger.close
            await asyncio.get_running_loop().run_in_executor(None, release)
            self.compaction.release(topic)
            if delete_data:
                await asyncio.get_running_loop().run_in_executor(None, self.compaction.delete, key)
        finally:
            self.unloading.discard(key)

    def loaded_objects(self) -> int:
        """Topics (and, with connections, those) the broker holds: see LongLivedObjects."""
        return len(self.topics)

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    # -- topics --------------------------------------------------------------------
    def partitions_of(self, name: TopicName) -> int | None:
        """Partition count of a partitioned topic, 0 for an existing plain topic, None if absent."""
        if name.partition_index < 0:
            count = self.metadata.get_partitioned_topic(str(name))
            if count is not None:
                return count
        if str(name) in self.topics or self.metadata.get_topic(str(name)) is not None:
            return 0
        if name.partition_index >= 0:
            parent = self.metadata.get_partitioned_topic(str(name.partitioned_topic))
            if parent is not None and name.partition_index < parent:
                return 0
        return None

    def partitioned_metadata(self, name: TopicName) -> int:
        """Answer PARTITIONED_METADATA, creating a partitioned topic when configured to."""
        known = self.partitions_of(name)
        if known is not None:
            return known
        topic_type, partitions = self.auto_topic_type(name)
        if self.auto_create_allowed(name) and name.partition_index < 0 and topic_type == "partitioned":
            self.create_partitioned_topic(name, partitions)
            return partitions
        return 0

    def namespace_policies(self, namespace: str) -> Policies | None:
        """The namespace's policies as the typed model, None if it does not exist. Asked on
        hot paths (every delayed entry, every publish with a delay bound), so each is
        parsed once and read again only after a metadata write."""
        self._forget_stale_policies()
        if namespace not in self._policies:
            stored = self.metadata.get_namespace_policies(namespace)
            self._policies[namespace] = None if stored is None else policies.read_stored(stored)
        return self._policies[namespace]

    def topic_policies(self, name: TopicName) -> TopicPolicies:
        """The topic's own policies (all unset when none were set); a partition has its
        partitioned topic's, as in Pulsar."""
        self._forget_stale_policies()
        key = str(name.partitioned_topic)
        found = self._topic_policies.get(key)
        if found is None:
            found = self._topic_policies[key] = policies.read_stored_topic(self.metadata.get_topic_policies(key))
        return found

    def _forget_stale_policies(self) -> None:
        changes = self.metadata.policy_changes
        if self._policies_at != changes:
            self._policies.clear()
            self._topic_policies.clear()
            self._policies_at = changes

    def access_context(self, namespace: str) -> AccessContext:
        """What an authorization decision on ``namespace`` (or a tenant alone) needs to know."""
        tenant, _, rest = namespace.partition("/")
        info = self.metadata.get_tenant(tenant) or {}
        found = self.namespace_policies(namespace) if rest else None
        auth = found.auth_policies if found is not None and found.auth_policies is not None else AuthPolicies()
        mode = (found.subscription_auth_mode if found is not None else None) or "None"
        return AccessContext(self.config.super_user_roles, frozenset(info.get("adminRoles") or ()), auth, mode)

    def missing_part(self, namespace: str) -> str | None:
        """"Tenant" or "Namespace" when that part of ``namespace`` (or a tenant alone) does not
        exist, else None: a role that may not act there is told what is missing first, as Pulsar does."""
        tenant, _, rest = namespace.partition("/")
        if self.metadata.get_tenant(tenant) is None:
            return "Tenant"
        if rest and self.namespace_policies(namespace) is None:
            return "Namespace"
        return None

    def subscription_refusal(self, role: str | None, name: TopicName, subscription: str) -> str | None:
        if not self.config.authorizationEnabled:
            return None
        context = self.access_context(name.namespace_name)
        return authorization.subscription_refusal(role, context, subscription, str(name))

    def topic_allowed(self, role: str | None, operation: Operation, name: TopicName) -> bool:
        """Whether ``role`` may do ``operation`` on the topic; always true with authorization off."""
        if not self.config.authorizationEnabled:
            return True
        context = self.access_context(name.namespace_name)
        return authorization.allowed(role, operation, context, str(name.partitioned_topic))

    def namespace_allowed(self, role: str | None, operation: Operation, namespace: str) -> bool:
        if not self.config.authorizationEnabled:
            return True
        return authorization.allowed(role, operation, self.access_context(namespace))

    def policies_of(self, name: TopicName) -> Policies:
        return self.namespace_policies(name.namespace_name) or Policies()

    def auto_topic_type(self, name: TopicName) -> tuple[str, int]:
        """The topic type and partition count auto-creation uses: the namespace's override, else config."""
        _, topic_type, partitions = policies.auto_topic_creation(self.policies_of(name), self.config)
        return topic_type, partitions

    def auto_create_allowed(self, name: TopicName) -> bool:
        found = self.namespace_policies(name.namespace_name)
        return found is not None and policies.auto_topic_creation(found, self.config)[0]

    def check_namespace(self, name: TopicName) -> None:
        if self.metadata.get_namespace_policies(name.namespace_name) is None:
            raise TopicNotFound(f"Namespace {name.namespace_name} does not exist")

    def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        self.check_namespace(name)
        if partitions <= 0:
            raise NotAllowed("Number of partitions must be more than 0")
        self.check_topic_count(name, adding=partitions)
        self.metadata.create_partitioned_topic(str(name), partitions)

    def get_topic(self, name: TopicName, create: bool) -> Topic:
        """The loaded topic, else loaded now on the event loop (admin paths; the binary
        protocol's PRODUCER and SUBSCRIBE use :meth:`load_topic`)."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if key in self._loading:  # its ledger is being opened on a worker thread
            raise ServiceNotReady(f"Topic {key} is being loaded; retry shortly")
        self._check_record(name, create)
        with _load_errors(key):
            ledger = self._open_ledger(name)
        return self._adopt(name, ledger)

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
        try:
            async with self._load_slots:
                topic = self.topics.get(key) or await self._load(name, create)
        except BaseException as exc:
            loading.set_exception(exc)
            loading.exception()  # retrieved: the loads that shared it see it, and nobody else must
            raise
        finally:
            del self._loading[key]
        loading.set_result(topic)
        return topic

    async def _load(self, name: TopicName, create: bool) -> Topic:
        key = str(name)
        self._check_record(name, create)
        if not name.persistent:  # in memory: nothing to wait for
            return self._adopt(name, self._open_ledger(name))
        ledger_id = self.ledger_ids.next_id()
        with _load_errors(key):
            ledger = await asyncio.get_running_loop().run_in_executor(None, self._open_ledger, name, ledger_id)
        return self._adopt(name, ledger)

    def _check_record(self, name: TopicName, create: bool) -> None:
        """The topic exists in the metadata, or is created there now if it may be."""
        key = str(name)
        if key in self.unloading:
            raise ServiceNotReady(f"Topic {key} is being unloaded or deleted; retry shortly")
        exists = self.metadata.get_topic(key) is not None or self._is_partition_of_existing(name)
        if not exists:
            if not create or not self.auto_create_allowed(name):
                raise TopicNotFound(f"Topic {key} does not exist")
            if self.metadata.get_partitioned_topic(key) is not None:
                raise NotAllowed(f"Topic {key} is partitioned; use its partitions")
            self.check_namespace(name)
            self.check_topic_count(name)
            self.metadata.create_topic(key)

    def check_topic_count(self, name: TopicName, adding: int = 1) -> None:
        """``maxTopicsPerNamespace``: partitions count one each, as in Pulsar."""
        namespace = name.namespace_name
        policies = self.policies_of(name)
        if not limits.resolved(policies.max_topics_per_namespace, self.config.maxTopicsPerNamespace):
            return
        plain = [t for t in self.metadata.list_topics(namespace) if TopicName.parse(t).partition_index < 0]
        existing = len(plain) + sum(self.metadata.list_partitioned_topics(namespace).values())
        limits.check_new_topic(namespace, existing + adding - 1, policies, self.config)

    def _is_partition_of_existing(self, name: TopicName) -> bool:
        if name.partition_index < 0:
            return False
        parent = self.metadata.get_partitioned_topic(str(name.partitioned_topic))
        if parent is not None and name.partition_index < parent:
            self.metadata.create_topic(str(name))
            return True
        return False

    def _open_ledger(self, name: TopicName, first_ledger_id: int | None = None) -> ManagedLedger:
        """The topic's ledger; on any thread when ``first_ledger_id`` was taken on the loop
        (ledger ids are handed out there)."""
        if not name.persistent:
            return MemoryLedger(str(name), self.ledger_ids.next_id, NON_PERSISTENT_LEDGER)
        return self.ledger_factory.open(str(name), first_ledger_id)

    def _adopt(self, name: TopicName, ledger: ManagedLedger) -> Topic:
        if name.persistent:
            if (budget := self.ledger_factory.budget) is not None:
                budget.enforce(keep=ledger)  # opened on a worker thread, which only registers
            # its new segment file and directory entry are made durable now, which also
            # gives back the descriptors the sync holds for them
            self.committer.mark_dirty(ledger)
        topic = self._open_topic(name, ledger)
        self.core.adopt(topic)
        return topic

    def _open_topic(self, name: TopicName, ledger: ManagedLedger) -> Topic:
        topic = Topic(name, ledger, self.config, dispatcher_factory=self._dispatcher_factory)
        topic.delayed = self.delayed_delivery_for(name)
        topic_lifecycle.restore(self, topic)
        for cursor_name, record in self.metadata.list_cursors(str(name)).items():
            if cursor_name == DEDUP_CURSOR:
                topic.dedup_snapshot_position = record.mark_delete
                continue
            if cursor_name == SHARED_INDEX_CURSOR:
                continue
            sub = topic.create_subscription(cursor_name, "Exclusive", durable=True,
                                            mark_delete=record.mark_delete, properties=record.properties)
            sub.cursor.restore_ranges(record.individually_deleted)
            sub.cursor.version = 0
            sub.persisted_version = 0
        self.compaction.restore(topic)
        self.apply_policies(topic, now_ms())
        for sub in topic.subscriptions.values():
            topic.delayed.recover(sub, now_ms())
        delayed_index.recover(self, topic, now_ms())
        return topic

    def apply_policies(self, topic: Topic, now: int) -> None:
        """Bring a loaded topic in line with its policies (topic, namespace, broker)."""
        deduplication.refresh(self, topic, now)
        property_dedup.refresh(self, topic)
        self.apply_publish_rate(topic)
        self.apply_dispatch_rates(topic)
        self.apply_delayed_tick(topic)
        topic.apply_policies(AppliedPolicies.resolve(self.topic_policies(topic.name), self.policies_of(topic.name),
                                                     self.config), now)

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

    def apply_publish_rate(self, topic: Topic) -> None:
        msgs, size = policies.publish_rate(self.policies_of(topic.name), self.config)
        current = topic.publish_limiter
        if current is not None and current.same_limits(msgs, size):
            return
        limiter = RateLimiter(msgs, size)
        topic.publish_limiter = limiter if limiter.active else None

    def apply_dispatch_rates(self, topic: Topic) -> None:
        """Each subscription's throttle: the topic's bucket (shared) and its own. Limits that
        did not change keep their buckets, so a policy refresh does not hand out tokens."""
        (topic_msgs, topic_bytes), (sub_msgs, sub_bytes) = policies.dispatch_rates(
            self.policies_of(topic.name), self.config)
        shared = topic.dispatch_limiter
        if shared is None or not shared.same_limits(topic_msgs, topic_bytes):
            shared = topic.dispatch_limiter = RateLimiter(topic_msgs, topic_bytes)
        for sub in topic.subscriptions.values():
            dispatcher = sub.dispatcher
            current = dispatcher.throttle
            if current is not None and current.shared is shared and current.own.same_limits(sub_msgs, sub_bytes):
                continue
            if current is not None:
                current.release()
            throttle = DispatchThrottle(dispatcher, shared, RateLimiter(sub_msgs, sub_bytes), self.core.timers.wake_up)
            dispatcher.throttle = throttle if throttle.active else None

    def publish_limited(self, topic: Topic) -> bool:
        """Whether a publish rate limit applies to ``topic`` at all (most sends need not ask)."""
        return self.broker_publish_limiter.active or topic.publish_limiter is not None

    def publish_pause_ms(self, topic: Topic, messages: int, size: int) -> int:
        """How long the connection a send came on must not be read (publish rate limits)."""
        now = int(monotonic_ms())
        pause = self.broker_publish_limiter.take(messages, size, now) \
            if self.broker_publish_limiter.active else 0
        limiter = topic.publish_limiter
        if limiter is not None:
            pause = max(pause, limiter.take(messages, size, now))
        return pause

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
        made.tick_time_ms = policies.delayed_delivery_tick_ms(self.topic_policies(name), self.policies_of(name),
                                                              self.config)
        return made

    def _delayed_delivery_active(self, name: TopicName) -> bool:
        return policies.delayed_delivery_active(self.topic_policies(name),
                                                self.namespace_policies(name.namespace_name) or Policies(), self.config)

    def apply_delayed_tick(self, topic: Topic) -> None:
        if topic.delayed is not None:
            tick = policies.delayed_delivery_tick_ms(self.topic_policies(topic.name), self.policies_of(topic.name),
                                                     self.config)
            topic.delayed.retick(tick, topic.subscriptions.values())

    @property
    def bucket_snapshot_storage(self) -> LedgerBucketSnapshotStorage:
        storage = self._bucket_storage
        if storage is None:
            storage = self._bucket_storage = LedgerBucketSnapshotStorage(
                self.data_dir / "buckets", self.metadata, background=self._bucket_work,
                ledger_ids=self.ledger_ids.next_id)
        return storage

    def _bucket_work(self, work: Callable[[MetadataStore], None]) -> object:
        """Bucket snapshot writes and deletes, on the metadata writer's thread once the broker
        runs (before, at start-up, the sweep may do them here)."""
        if self.loop is None:
            work(self.metadata)
            return None
        return self.writer.submit(work)

    def max_delay_ms(self, name: TopicName) -> int:
        """The longest delivery delay a message may ask for (0: no limit)."""
        return policies.max_delivery_delay_ms(self.topic_policies(name), self.policies_of(name), self.config)

    # -- storage callbacks -------------------------------------------------------------
    def append_done(self, topic: Topic) -> None:
        """A topic appended entries: write them once the connection's read is handled (one
        write per ledger for every SEND that read carried; ``write_appends``), at the
        latest when this loop turn is over; then the next group commit syncs them."""
        if topic in self._unflushed:
            return
        self._unflushed[topic] = None
        if len(self._unflushed) == 1:
            if self.loop is not None and not self.loop.is_closed():
                self.loop.call_soon(self._flush_appends)
            else:
                self._flush_appends()

    def write_appends(self) -> None:
        """Write what the SENDs handled so far appended. Waiting longer would batch more
        but delays every receipt, and clients with a bounded queue of pending sends (the
        official ones) then send less."""
        if self._unflushed:
            self._flush_appends()

    def _flush_appends(self) -> None:
        unflushed, self._unflushed = self._unflushed, {}
        for topic in unflushed:
            try:
                topic.ledger.flush()
            except AppendFailed as exc:
                self._log_append_failure(exc)
                topic.appends_taken_back(exc.position, exc.reason)
            except LedgerClosed:
                continue  # unloaded or deleted meanwhile: its receipts went with it
            self.committer.mark_dirty(topic.ledger)

    def _log_append_failure(self, exc: AppendFailed) -> None:
        """Once per reason a minute: a full disk fails every append, and the log must not
        fill what is left of it."""
        now = monotonic_ms() / 1000
        last = self._last_append_error
        if last is None or last[0] != exc.reason or now - last[1] >= 60:
            self._last_append_error = (exc.reason, now)
            log.error("%s (repeats of this failure are logged once a minute)", exc)

    def _on_sync_error_from_thread(self, ledger: ManagedLedger, exc: Exception) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_sync_failed, ledger, exc)

    def _on_sync_failed(self, ledger: ManagedLedger, exc: Exception) -> None:
        """A ledger that cannot sync cannot promise anything more: the sends waiting on it
        get an error (rather than waiting for ever), and the topic is unloaded so that its
        next use recovers the files afresh."""
        topic = self.topics.get(ledger.name)
        if topic is None or topic.ledger is not ledger:
            return
        log.error("sync of %s failed, unloading it: %s", ledger.name, exc)
        if topic.pending_receipts:
            topic.appends_taken_back(topic.pending_receipts[0].pos, f"the write could not be made durable ({exc})")
        if str(topic.name) not in self.unloading:
            self.background(self._release_topic(topic, delete_data=False), f"unloading {topic.name}")

    def _on_synced_from_thread(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            self.activity.reports_posted += 1
            loop.call_soon_threadsafe(self._on_synced_report, synced)

    def _on_synced_report(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        self.activity.reports_handled += 1
        self._on_synced(synced)
        self.activity.settled()

    def _on_synced(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        now = now_ms()
        for ledger, pos in synced:
            topic = self.topics.get(ledger.name)
            if topic is not None and topic.ledger is ledger:
                self.recorder.persisted(ledger.name, pos)
                topic.on_persisted(pos, now)

    # -- cursors ---------------------------------------------------------------------------
    def _persist_tick(self, now: int) -> None:
        """The cursor-persist deadline: changed cursors, due dedup snapshots, policy changes,
        and a sync of what the loop's metadata connection committed that nobody waited for
        (topics created or deleted by the broker itself)."""
        self.persist_cursors()
        self.refresh_policies()
        changes = self.metadata.changes
        if changes != self._synced_changes:
            self._synced_changes = changes
            self.writer.barrier()

    # -- retention --------------------------------------------------------------------------
    def _remove_detached(self, topic: Topic, detached: list[int]) -> None:
        """Retention detached ledgers of ``topic``: their files are removed once the cursors
        that moved past them are durable, so that after a crash no stored cursor stands in
        a removed ledger; the removal (unlinks, a directory sync) runs on a worker thread."""
        log.info("retention of %s deletes ledgers %s", topic.name, detached)
        if self.loop is None:
            topic.ledger.remove_detached()
            return
        key = str(topic.name)
        written = asyncio.wrap_future(self.persist_topic_cursors(topic))
        work = asyncio.ensure_future(self._remove_files(topic, written))
        self._removals[key] = work
        work.add_done_callback(lambda done: self._removal_done(key, done))

    @staticmethod
    async def _remove_files(topic: Topic, written: asyncio.Future[None]) -> None:
        await written
        await asyncio.get_running_loop().run_in_executor(None, topic.ledger.remove_detached)

    def _removal_done(self, key: str, done: asyncio.Future[None]) -> None:
        if self._removals.get(key) is done:
            del self._removals[key]
        if not done.cancelled() and done.exception() is not None:
            log.error("removing the deleted ledgers of %s failed (they go at the next removal)", key,
                      exc_info=done.exception())

    async def _finish_removal(self, topic: Topic, delete_data: bool) -> None:
        """Before a topic's files are closed, retention is applied once more (an unloaded
        topic is not checked), and every removal of its files has finished."""
        if topic.name.persistent and not delete_data:
            detached = topic.apply_retention(now_ms())
            if detached:
                self._remove_detached(topic, detached)
        pending = self._removals.get(str(topic.name))
        if pending is not None:
            await asyncio.wait([pending])

    def persist_cursors(self, force: bool = False) -> concurrent.futures.Future[None]:
        """Write changed durable cursors (every one with ``force``) off the event loop."""
        if self.config.delayedDeliverySharedIndexEnabled:
            for topic in self.topics.values():
                delayed_index.persist(self, topic, force)
        return self._write_cursors(self.core.cursor_writes(force=force, now_ms=now_ms()))

    def persist_topic_cursors(self, topic: Topic, force: bool = False) -> concurrent.futures.Future[None]:
        """Write one topic's changed cursors; the future is done once they are durable."""
        delayed_index.persist(self, topic, force)
        return self._write_cursors(self.core.cursor_writes([topic], force=force, now_ms=now_ms()))

    async def store_cursors(self, topic: Topic) -> None:
        """Persist a topic's changed cursors and wait until they are durable."""
        await asyncio.wrap_future(self.persist_topic_cursors(topic))

    def _write_cursors(self, writes: list[CursorWrite]) -> concurrent.futures.Future[None]:
        future = self.writer.put_cursors((w.topic, w.name, w.record) for w in writes)
        if writes:
            def check(done: concurrent.futures.Future[None]) -> None:
                if done.exception() is not None:
                    log.error("writing %d cursors failed", len(writes), exc_info=done.exception())
                    self.core.cursor_write_failed(writes)
            future.add_done_callback(check)
        return future

    def on_loop(self, work: concurrent.futures.Future[Any],
                callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback`` with the error of ``work`` (None when it succeeded) on the
        event loop once the other thread is done with it."""
        def done(finished: concurrent.futures.Future[Any]) -> None:
            error = finished.exception()
            loop = self.loop
            if loop is None or loop.is_closed():
                callback(error)
            else:
                loop.call_soon_threadsafe(callback, error)
        work.add_done_callback(done)

    def delete_cursor(self, topic: Topic, name: str) -> None:
        if topic.name.persistent:
            self.writer.delete_cursor(str(topic.name), name)

    # -- shutdown -----------------------------------------------------------------------------
    async def close(self) -> None:
        self.ready = False
        if self._loading:  # topics whose ledger is being opened join the others before they close
            await asyncio.wait([asyncio.shield(f) for f in self._loading.values()])
        self.timer.stop()
        self.long_lived.uninstall()
        for topic in list(self.topics.values()):
            topic.close_all_clients()
        await asyncio.get_running_loop().run_in_executor(None, self.committer.flush)
        if self.loop is not None:
            synced = [(t.ledger, last) for t in self.topics.values() if (last := t.ledger.last_position()) is not None]
            self._on_synced(synced)
        await asyncio.wrap_future(self.persist_cursors(force=True))
        if self._removals:
            await asyncio.wait(list(self._removals.values()))
        property_dedup.store_snapshots(self)
        self.committer.stop()
        for topic in self.topics.values():
            topic.ledger.close()
            self.compaction.release(topic)
        await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
        self.metadata.close()
        self.activity.close()

    def metadata_error(self, exc: Exception) -> MetadataError:
        log.exception("metadata store failure")
        return MetadataError(f"metadata store failure: {exc}")


class PumpedConnection(Protocol):
    """What the broker does with its client connections (the server's ``ServerConnection``)."""

    reading_paused: bool

    def update_reading(self) -> None: ...

    def close(self) -> None: ...


class BrokerOperations(BrokerService):
    """Operations the connection handlers and the admin API share."""

    def __init__(self, config: BrokerConfig, data_dir: Path) -> None:
        super().__init__(config, data_dir)
        self.connections: set[PumpedConnection] = set()
        self.publish_buffer = PublishBuffer(config.publish_buffer_bytes)
        self._connections_per_ip: collections.Counter[str] = collections.Counter()
        self.started_at = now_ms()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        super().start(loop)
        topic_lifecycle.start(self, now_ms())

    def loaded_objects(self) -> int:
        return len(self.topics) + len(self.connections)

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

    @staticmethod
    def timestamp() -> str:
        import datetime
        return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def list_topics(self, namespace: str, mode: int = 2) -> list[str]:
        """Fully qualified names, partitions included (GET_TOPICS_OF_NAMESPACE)."""
        names = set(self.metadata.list_topics(namespace)) | {
            str(t.name) for t in self.topics.values() if t.name.namespace_name == namespace}
        for parent, count in self.metadata.list_partitioned_topics(namespace).items():
            names.update(str(TopicName.parse(parent).partition(i)) for i in range(count))
        wanted = {0: ("persistent",), 1: ("non-persistent",)}.get(mode, ("persistent", "non-persistent"))
        return sorted(n for n in names if n.split("://", 1)[0] in wanted)

    def last_sequence_id(self, topic: Topic, producer_name: str) -> int:
        if topic.dedup is None:
            return -1
        return int(topic.dedup.last_sequence_id(producer_name))

    def check_producer_allowed(self, topic: Topic) -> None:
        if topic.dedup is not None and topic.dedup.status is DedupStatus.RECOVERING:
            from magnetar.core.errors import ServiceNotReady
            raise ServiceNotReady(f"Topic {topic.name} is recovering its deduplication state")
        limits.check_new_producer(topic, self.topic_policies(topic.name), self.policies_of(topic.name), self.config)
        refusal = topic_lifecycle.producer_refusal(self, topic)
        if refusal is not None:
            raise refusal

    def check_subscription_allowed(self, topic: Topic, subscription: str, sub_type: str) -> None:
        policies = self.policies_of(topic.name)
        enabled = policies.subscription_types_enabled
        if enabled and sub_type not in enabled:
            raise NotAllowed(f"Subscription type {sub_type} is not enabled on namespace {topic.name.namespace_name}")
        limits.check_new_consumer(topic, subscription, self.topic_policies(topic.name), policies, self.config)

    def publish(self, topic: Topic, producer: Producer, sequence_id: int, highest: int, num_messages: int,
                entry: bytes, info: EntryInfo) -> None:
        """Core judges and appends; the shell answers storage failures and writes the append."""
        refusal = self.disk.refusal()
        if refusal is not None:
            raise PersistenceError(refusal)
        pos = publish.publish(topic, producer, sequence_id, highest, num_messages, entry, info, now_ms())
        if pos is not None:
            self._appended(topic, (pos,))

    def publish_run(self, topic: Topic, producer: Producer, sends: Sequence[Send]) -> int:
        """Publish a prefix of one producer's sends (a read's worth) as :meth:`publish`
        does each; how many were taken (at least one). Raises for the first when it fails."""
        refusal = self.disk.refusal()
        if refusal is not None:
            raise PersistenceError(refusal)
        positions = publish.publish_run(topic, producer, sends, now_ms())
        if positions:
            self._appended(topic, positions)
        return max(len(positions), 1)

    def _appended(self, topic: Topic, positions: Sequence[Position]) -> None:
        self.recorder.appended(topic.ledger.name, positions)
        if topic.name.persistent:
            self.append_done(topic)
        else:
            last = topic.ledger.last_position()
            if last is not None:
                self.recorder.persisted(topic.ledger.name, last)
                topic.on_persisted(last, now_ms())

    def ensure_subscription(self, topic: Topic, name: str) -> None:
        if name not in topic.subscriptions:
            from magnetar.core.positions import BEFORE_START
            topic.create_subscription(name, "Exclusive", durable=True, mark_delete=BEFORE_START)
            self.persist_topic_cursors(topic)

    def delete_subscription(self, topic: Topic, name: str) -> None:
        topic.unsubscribe(name, force=True)
        self.delete_cursor(topic, name)
        delayed_index.persist(self, topic)

    def reset_cursor(self, sub: Subscription, mark_delete: Position) -> None:
        sub.reset_cursor(mark_delete, now_ms())

    def reset_cursor_by_time(self, sub: Subscription, timestamp_ms: int) -> None:
        cursor_moves.reset_cursor_by_time(sub, timestamp_ms, now_ms())

    @staticmethod
    def position_before_time(topic: Topic, timestamp_ms: int) -> Position:
        return cursor_moves.position_before_time(topic, timestamp_ms)

    @staticmethod
    def last_message_id(topic: EntrySource) -> tuple[Position, int]:
        return cursor_moves.last_message_id(topic)

    # -- schemas ---------------------------------------------------------------------
    def schema_strategy(self, name: TopicName) -> SchemaCompatibilityStrategy:
        """The compatibility strategy that applies to the topic (topic, namespace, broker)."""
        found = policies.schema_compatibility_strategy(self.topic_policies(name), self.policies_of(name), self.config)
        return SchemaCompatibilityStrategy(found)

    def add_schema(self, name: TopicName, schema: SchemaData) -> int:
        """The version of ``schema`` on the topic, stored as the next one if it is new and
        may be added (Pulsar's ``AbstractTopic.addSchema``); raises IncompatibleSchema."""
        history = self.schemas.history(name)
        found = schema_versions.version_to_add(history, schema, self.schema_strategy(name),
                                               policies.allow_auto_update_schema(self.policies_of(name), self.config))
        if found is not None:
            return found
        return self.schemas.append(name, schema, now_ms()).version

    def producer_schema_version(self, topic: Topic, schema: SchemaData | None) -> bytes | None:
        """A new producer's schema version, or None when it sends none (then refused if
        schema validation is enforced and the topic has a schema)."""
        if schema is None:
            schema_versions.check_producer_without_schema(
                self.schemas.history(topic.name),
                policies.schema_validation_enforced(self.policies_of(topic.name), self.config))
            return None
        return encode_version(self.add_schema(topic.name, schema))

    def check_consumer_schema(self, topic: Topic, schema: SchemaData) -> None:
        """A subscribing consumer's schema: added to an idle topic without one, else
        checked for compatibility (Pulsar's ``addSchemaIfIdleOrCheckCompatible``)."""
        if schema.schema_type == "AUTO_CONSUME":
            return
        in_use = bool(topic.producers) or topic.ledger.total_size_bytes() > 0 or any(
            consumer.schema_type != "AUTO_CONSUME" for sub in topic.subscriptions.values()
            for consumer in sub.consumers)
        history = self.schemas.history(topic.name)
        if schema_versions.consumer_adds_schema(history, schema, self.schema_strategy(topic.name), in_use):
            self.add_schema(topic.name, schema)

    def delete_schema(self, name: TopicName, force: bool) -> int | None:
        """Pulsar's schema delete: a marker version (soft), or every version gone (force).
        Returns the marker's version, None when forced or when there was nothing to delete."""
        history = self.schemas.history(name)
        if force:
            self.schemas.delete_all(name)
            return None
        if schema_versions.latest(history) is None:
            return None
        return self.schemas.append(name, SchemaData("NONE", b""), now_ms(), deleted=True).version

    def consumer_stats_response(self, request_id: int, consumer: object, sub: object):  # type: ignore[no-untyped-def]
        from magnetar.core.consumer import Consumer
        from magnetar.core.subscription import Subscription
        from magnetar.wire import commands
        assert isinstance(consumer, Consumer) and isinstance(sub, Subscription)
        now = now_ms()
        rate, throughput = consumer.msg_out.rate(now)
        return commands.consumer_stats_response(
            request_id, msgRateOut=rate, msgThroughputOut=throughput,
            msgRateRedeliver=consumer.redeliver.rate(now)[0], consumerName=consumer.consumer_name,
            availablePermits=max(consumer.permits, 0), unackedMessages=consumer.unacked_messages,
            blockedConsumerOnUnackedMsgs=consumer.blocked_on_unacked, address=consumer.address,
            connectedSince=consumer.connected_since, type=sub.sub_type, msgBacklog=sub.backlog())

    # -- admin operations ------------------------------------------------------------
    def create_subscription_at(self, topic: Topic, name: str, mark_delete: Position) -> None:
        """A durable subscription whose first delivery is the entry after ``mark_delete``."""
        topic.create_subscription(name, "Exclusive", durable=True, mark_delete=mark_delete)

    @staticmethod
    def skip_messages(sub: Subscription, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many were skipped."""
        return cursor_moves.skip_messages(sub, count)

    @staticmethod
    def expire_messages(sub: Subscription, expire_time_s: int) -> int:
        """Acknowledge every entry published more than ``expire_time_s`` ago (message TTL)."""
        return message_expiry.expire(sub, expire_time_s, now_ms())

    async def unload_topic(self, name: TopicName) -> bool:
        """Close every client and release the topic; it is reopened on next use."""
        topic = self.topics.get(str(name))
        if topic is None:
            return False
        await self._release_topic(topic, delete_data=False)
        return True

    async def delete_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        """Delete every partition, then the partitioned topic's metadata."""
        for index in range(partitions):
            await self.delete_topic(name.partition(index))
        self.schemas.delete_all(name)  # partitions share their parent's schemas
        self.metadata.delete_partitioned_topic(str(name))
        self.metadata.delete_topic_policies(str(name))

    async def unload_namespace(self, namespace: str) -> None:
        """Unload every loaded topic of the namespace; clients reconnect and load them again."""
        for topic in [t for t in self.topics.values() if t.name.namespace_name == namespace]:
            await self.unload_topic(topic.name)

    async def delete_topic(self, name: TopicName) -> None:
        """Remove the topic, its data, cursors and schemas; clients are disconnected."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            await self._release_topic(topic, delete_data=True)
        elif name.persistent and self.metadata.get_topic(key) is not None:
            unloaded = self.ledger_factory.open(key)
            await asyncio.get_running_loop().run_in_executor(None, unloaded.delete)
            await asyncio.get_running_loop().run_in_executor(None, self.compaction.delete, key)
        await asyncio.wrap_future(self.writer.submit(lambda store: store.delete_cursors(key)))
        if name.partition_index < 0:
            self.schemas.delete_all(name)
            self.metadata.delete_topic_policies(key)
        self.metadata.delete_topic(key)
        self.recorder.forget_topic(key)


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
