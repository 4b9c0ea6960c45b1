"""What the broker's doors may ask of it: the binary protocol's commands
(:class:`~magnetar.core.broker.command_shell.CommandShell`) and the admin REST API
(:class:`AdminFacade`) reach the same rule objects through :class:`BrokerFacade`, so a
rule lives in one place for both. Beside the rules: the loaded topics, the few operations
that need the shell's storage and executors (loading, releasing, terminating a topic,
storing cursors, compacting, waiting until metadata is durable), and the broker's clock.

Protocols, so that a command or an admin route names what it uses and never the shell
that provides it (``magnetar.server.broker_service.BrokerService`` implements them, and
the simulation implements the commands' part). The members are read-only: a door asks,
the broker decides.
"""

from __future__ import annotations

from typing import Any, Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.cluster.namespace_bundles import NamespaceBundle
from magnetar.core.cluster.topic_lookup import AdminRedirect, Connect, NotReady
from magnetar.core.names import TopicName
from magnetar.core.policies.disk_usage import DiskUsage
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.positions import Position
from magnetar.core.schemas.topic_schemas import SchemaHistory, TopicSchemas
from magnetar.core.security.access_rules import AccessRules
from magnetar.core.stats import LatencyQuantiles, LatencyValues
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.core.topics.topic import Topic
from magnetar.core.topics.topic_records import TopicRecords


class TopicReleases(Protocol):
    """Unloading and deleting topics: their clients closed, cursors written, data removed."""

    async def unload_topic(self, name: TopicName) -> bool: ...

    async def unload_namespace(self, namespace: str) -> None: ...

    async def delete_topic(self, name: TopicName) -> None: ...

    async def delete_partitioned_topic(self, name: TopicName, partitions: int) -> None: ...


class CursorStores(Protocol):
    async def store_cursors(self, topic: Topic) -> None:
        """Persist a topic's changed cursors and wait until they are durable."""


class Compactions(Protocol):
    def trigger(self, topic: Topic) -> object:
        """Start compacting; raises ``CompactionAlreadyRunning`` while one runs."""


class LatencyRecords(Protocol):
    """The latencies the shell measured, for the stats and ``/metrics``."""

    @property
    def publish_latency(self) -> LatencyQuantiles: ...

    def write_latency_of(self, topic: str) -> LatencyValues | None: ...

    def ledger_write_latency_of(self, topic: str) -> LatencyValues | None: ...


class LoadBalancing(Protocol):
    """A cluster's broker's load manager, as the admin API asks it."""

    def leader_broker(self) -> dict[str, Any] | None:
        """The leader as this broker last saw it (Pulsar's ``LeaderBroker``), None when none is elected."""

    def load_report(self) -> dict[str, Any]:
        """This broker's latest load report (Pulsar's ``LocalBrokerData``)."""

    async def split_bundle(self, bundle: NamespaceBundle, algorithm: str, unload: bool, path: str) \
            -> AdminRedirect | None:
        """Split ``bundle`` if this broker owns it (or nobody does), else the redirect of ``path`` to its owner."""

    def decision_counts(self) -> dict[str, int]:
        """What the leader decided so far: ``unload_broker``, ``unload_bundle``, ``bundles_split``."""


class TopicOwners(Protocol):
    """Who serves a topic among the brokers of a cluster (absent on a standalone broker,
    which serves every topic)."""

    async def admin_answer(self, name: TopicName, path: str) -> Connect | AdminRedirect | NotReady:
        """Serve an admin request on ``name`` here (this broker owns or just acquired its
        bundle), or redirect it to the owner's web service (``path``: the request's path
        and query)."""

    async def broker_ids(self) -> list[str]:
        """The registered brokers (``host:port``), sorted."""

    @property
    def broker_id(self) -> str:
        """This broker's id."""

    def owned_bundles(self) -> list[str]:
        """The bundles this broker owns, ``tenant/ns/0x..._0x...``, sorted."""

    def serves(self, name: TopicName) -> bool:
        """Whether this broker owns the topic's bundle now (as last read; no store call)."""

    async def web_url_of(self, broker_id: str) -> str | None:
        """A registered broker's web service URL; None when it is not registered."""

    @property
    def load_balancing(self) -> LoadBalancing | None:
        """The broker's load manager (None until it is set up)."""

    async def unload_bundle(self, bundle: NamespaceBundle, path: str,
                            destination: str | None = None) -> AdminRedirect | None:
        """Hand ``bundle`` over if this broker owns it (its topics closed, their clients sent
        to ``destination`` or the broker the placement picks, its node deleted) and answer
        None; None too when nobody owns it; else the redirect of ``path`` to its owner."""


class BrokerFacade(Protocol):
    """What both doors ask: the rule objects, topics by name, durability and the clock."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def ready(self) -> bool:
        """False while the broker starts or stops: new producers and consumers are refused."""

    @property
    def policies(self) -> PolicyCache: ...

    @property
    def access(self) -> AccessRules: ...

    @property
    def records(self) -> TopicRecords: ...

    @property
    def schemas(self) -> SchemaHistory: ...

    @property
    def topic_schemas(self) -> TopicSchemas: ...

    @property
    def addresses(self) -> BrokerAddresses: ...

    @property
    def metadata_changes(self) -> int:
        """Metadata writes so far: an answer that follows none needs no durability wait."""

    def metadata_durable(self) -> Any:
        """A handle done once every metadata write made so far is durable."""

    def now_ms(self) -> int:
        """The broker's wall clock, in milliseconds."""

    def delete_subscription(self, topic: Topic, name: str) -> None: ...


class AdminFacade(BrokerFacade, Protocol):
    """What the admin REST API asks besides: the loaded topics themselves, the stats the
    shell measures, and releasing, terminating, compacting topics and storing cursors."""

    @property
    def topics(self) -> LoadedTopics:
        """The loaded topics by name."""

    @property
    def timers(self) -> BrokerTimers:
        """The broker's one timer: admin's periodic work (the rate history) runs on it too."""

    @property
    def disk(self) -> DiskUsage: ...

    @property
    def release(self) -> TopicReleases: ...

    @property
    def cursors(self) -> CursorStores: ...

    @property
    def compaction(self) -> Compactions: ...

    @property
    def recorder(self) -> LatencyRecords: ...

    @property
    def cluster(self) -> TopicOwners | None:
        """The cluster's topic owners; None on a standalone broker."""

    async def terminate(self, name: TopicName) -> Position:
        """Terminate a loaded persistent topic; its last message id, stored before it is answered."""

    def policies_changed(self, name: TopicName | str) -> None:
        """A topic's (TopicName) or a namespace's (str) policies were written."""
