"""Which topics exist, which may be created, and how partitioned topics answer lookups.

A topic exists when the metadata store has its record, or when it is a partition of a
partitioned topic that exists (the partition's record is then written on first use).
Auto-creation follows the namespace's override, else the broker's settings; creating a
topic counts against ``maxTopicsPerNamespace`` (a partition counts as one topic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import NotAllowed, TopicNotFound
from magnetar.core.names import TopicName
from magnetar.core.policies import auto_topic_creation, limits
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.topics.topic import Topic

#: GET_TOPICS_OF_NAMESPACE's mode -> the domains it lists (any other mode: both)
LISTED_DOMAINS = {0: ("persistent",), 1: ("non-persistent",)}


class TopicStore(Protocol):
    """What the rules read and write of the metadata store."""

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None: ...

    def get_topic(self, topic: str) -> dict[str, Any] | None: ...

    def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> None: ...

    def list_topics(self, namespace: str) -> list[str]: ...

    def get_partitioned_topic(self, topic: str) -> int | None: ...

    def create_partitioned_topic(self, topic: str, partitions: int) -> None: ...

    def list_partitioned_topics(self, namespace: str) -> dict[str, int]: ...


class TopicRecords:
    def __init__(self, store: TopicStore, policies: PolicyCache, config: BrokerConfig,
                 loaded: Mapping[str, Topic]) -> None:
        self._store = store
        self._policies = policies
        self._config = config
        #: the loaded topics by name: a loaded topic exists whatever the store says
        self._loaded = loaded

    def partitions_of(self, name: TopicName) -> int | None:
        """Partition count of a partitioned topic, 0 for an existing plain topic, None if absent."""
        store = self._store
        if name.partition_index < 0:
            count = store.get_partitioned_topic(str(name))
            if count is not None:
                return count
        if str(name) in self._loaded or store.get_topic(str(name)) is not None:
            return 0
        if name.partition_index >= 0:
            parent = store.get_partitioned_topic(str(name.partitioned_topic))
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

    def auto_topic_type(self, name: TopicName) -> tuple[str, int]:
        """The topic type and partition count auto-creation uses: the namespace's override, else config."""
        _, topic_type, partitions = auto_topic_creation(self._policies.policies_of(name), self._config)
        return topic_type, partitions

    def auto_create_allowed(self, name: TopicName) -> bool:
        found = self._policies.namespace_policies(name.namespace_name)
        return found is not None and auto_topic_creation(found, self._config)[0]

    def check_namespace(self, name: TopicName) -> None:
        if self._store.get_namespace_policies(name.namespace_name) is None:
            raise TopicNotFound(f"Namespace {name.namespace_name} does not exist")

    def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        self.check_namespace(name)
        if partitions <= 0:
            raise NotAllowed("Number of partitions must be more than 0")
        self.check_topic_count(name, adding=partitions)
        self._store.create_partitioned_topic(str(name), partitions)

    def check_record(self, name: TopicName, create: bool) -> None:
        """The topic exists in the metadata, or is created there now if it may be."""
        key = str(name)
        if self._store.get_topic(key) is not None or self._is_partition_of_existing(name):
            return
        if not create or not self.auto_create_allowed(name):
            raise TopicNotFound(f"Topic {key} does not exist")
        if self._store.get_partitioned_topic(key) is not None:
            raise NotAllowed(f"Topic {key} is partitioned; use its partitions")
        self.check_namespace(name)
        self.check_topic_count(name)
        self._store.create_topic(key)

    def check_topic_count(self, name: TopicName, adding: int = 1) -> None:
        """``maxTopicsPerNamespace``: partitions count one each, as in Pulsar."""
        namespace = name.namespace_name
        found = self._policies.policies_of(name)
        if not limits.resolved(found.max_topics_per_namespace, self._config.maxTopicsPerNamespace):
            return
        store = self._store
        plain = [t for t in store.list_topics(namespace) if TopicName.parse(t).partition_index < 0]
        existing = len(plain) + sum(store.list_partitioned_topics(namespace).values())
        limits.check_new_topic(namespace, existing + adding - 1, found, self._config)

    def _is_partition_of_existing(self, name: TopicName) -> bool:
        if name.partition_index < 0:
            return False
        parent = self._store.get_partitioned_topic(str(name.partitioned_topic))
        if parent is not None and name.partition_index < parent:
            self._store.create_topic(str(name))
            return True
        return False

    def list_topics(self, namespace: str, mode: int = 2) -> list[str]:
        """Fully qualified names, partitions included (GET_TOPICS_OF_NAMESPACE's modes)."""
        names = set(self._store.list_topics(namespace)) | {
            str(t.name) for t in self._loaded.values() if t.name.namespace_name == namespace}
        for parent, count in self._store.list_partitioned_topics(namespace).items():
            names.update(str(TopicName.parse(parent).partition(i)) for i in range(count))
        wanted = LISTED_DOMAINS.get(mode, ("persistent", "non-persistent"))
        return sorted(n for n in names if n.split("://", 1)[0] in wanted)
