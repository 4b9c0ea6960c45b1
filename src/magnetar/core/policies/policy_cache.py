"""The policies that apply to a name, read from the metadata store once per change.

Policies are asked for on hot paths (every delayed entry, every new producer), so each
namespace's and topic's is parsed once and read again only after a policy write: the
store counts those writes, and every value here is valid while the count stands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies import Policies, TopicPolicies, read_stored, read_stored_topic

T = TypeVar("T")


class PolicyStore(Protocol):
    """What the cache reads of the metadata store."""

    @property
    def policy_changes(self) -> int: ...

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None: ...

    def get_topic_policies(self, topic: str) -> dict[str, Any] | None: ...


class PolicyCache:
    def __init__(self, store: PolicyStore, config: BrokerConfig) -> None:
        self._store = store
        self._config = config
        self._namespaces: dict[str, Policies | None] = {}
        self._topics: dict[str, TopicPolicies] = {}
        self._valid_at = -1

    def namespace_policies(self, namespace: str) -> Policies | None:
        """The namespace's policies as the typed model, None if it does not exist."""
        self._forget_stale()
        if namespace not in self._namespaces:
            stored = self._store.get_namespace_policies(namespace)
            self._namespaces[namespace] = None if stored is None else read_stored(stored)
        return self._namespaces[namespace]

    def topic_policies(self, name: TopicName) -> TopicPolicies:
        """The topic's own policies (all unset when none were set); a partition has its
        partitioned topic's, as in Pulsar."""
        self._forget_stale()
        key = str(name.partitioned_topic)
        found = self._topics.get(key)
        if found is None:
            found = self._topics[key] = read_stored_topic(self._store.get_topic_policies(key))
        return found

    def policies_of(self, name: TopicName) -> Policies:
        """The policies of the topic's namespace (defaults when it has none)."""
        return self.namespace_policies(name.namespace_name) or Policies()

    def resolve(self, rule: Callable[[TopicPolicies, Policies, BrokerConfig], T], name: TopicName) -> T:
        """What ``rule`` resolves for the topic: its own policy, else its namespace's, else
        the broker's setting (the rules are :mod:`magnetar.core.policies`')."""
        return rule(self.topic_policies(name), self.policies_of(name), self._config)

    def _forget_stale(self) -> None:
        changes = self._store.policy_changes
        if self._valid_at != changes:
            self._namespaces.clear()
            self._topics.clear()
            self._valid_at = changes
