"""Whether a role may act on a topic or namespace, with what the decision needs read from
the metadata store (the tenant's admin roles, the namespace's permissions and
subscription auth mode). The decisions themselves are :mod:`.authorization`'s; the
binary protocol's commands and the admin REST ask here alike."""

from __future__ import annotations

from typing import Any, Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.security import authorization
from magnetar.core.security.authorization import AccessContext, AuthPolicies, Operation


class TenantStore(Protocol):
    def get_tenant(self, name: str) -> dict[str, Any] | None: ...


class AccessRules:
    def __init__(self, store: TenantStore, policies: PolicyCache, config: BrokerConfig) -> None:
        self._store = store
        self._policies = policies
        self._config = config

    def access_context(self, namespace: str) -> AccessContext:
        """What an authorization decision on ``namespace`` (or a tenant alone) needs to know."""
        tenant, _, rest = namespace.partition("/")
        info = self._store.get_tenant(tenant) or {}
        found = self._policies.namespace_policies(namespace) if rest else None
        auth = found.auth_policies if found is not None and found.auth_policies is not None else AuthPolicies()
        mode = (found.subscription_auth_mode if found is not None else None) or "None"
        return AccessContext(self._config.super_user_roles, frozenset(info.get("adminRoles") or ()), auth, mode)

    def missing_part(self, namespace: str) -> str | None:
        """"Tenant" or "Namespace" when that part of ``namespace`` (or a tenant alone) does not
        exist, else None: a role that may not act there is told what is missing first, as Pulsar does."""
        tenant, _, rest = namespace.partition("/")
        if self._store.get_tenant(tenant) is None:
            return "Tenant"
        if rest and self._policies.namespace_policies(namespace) is None:
            return "Namespace"
        return None

    def subscription_refusal(self, role: str | None, name: TopicName, subscription: str) -> str | None:
        if not self._config.authorizationEnabled:
            return None
        context = self.access_context(name.namespace_name)
        return authorization.subscription_refusal(role, context, subscription, str(name))

    def topic_allowed(self, role: str | None, operation: Operation, name: TopicName) -> bool:
        """Whether ``role`` may do ``operation`` on the topic; always true with authorization off."""
        if not self._config.authorizationEnabled:
            return True
        context = self.access_context(name.namespace_name)
        return authorization.allowed(role, operation, context, str(name.partitioned_topic))

    def namespace_allowed(self, role: str | None, operation: Operation, namespace: str) -> bool:
        if not self._config.authorizationEnabled:
            return True
        return authorization.allowed(role, operation, self.access_context(namespace))
