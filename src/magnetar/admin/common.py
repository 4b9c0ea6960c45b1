"""What every admin route needs: the broker, names checked as Pulsar checks them, existence checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.errors import RestError, conflict, not_found, precondition_failed
from magnetar.admin.store_access import StoreRules, in_store
from magnetar.core.errors import InvalidTopicName, TopicNotFound
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.metadata.policy_updates import update_namespace_policies
from magnetar.core.metadata.records import NotFound, VersionConflict
from magnetar.core.names import TopicName, check_named_entity
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic


async def broker_of(request: Request) -> AdminBroker:
    broker: AdminBroker = request.app.state.broker
    return broker


Broker = Annotated[AdminBroker, Depends(broker_of)]

#: OpenAPI description of responses that are a message payload or plain text.
OCTET_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {}},
          "description": "The message payload; its metadata in X-Pulsar-* headers"}}
PLAIN_TEXT: dict[int | str, dict[str, Any]] = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}}


def check_name(kind: str, name: str) -> str:
    """Tenants, namespaces and clusters: Pulsar answers 412 for an illegal name."""
    try:
        return check_named_entity(kind, name)
    except InvalidTopicName as exc:
        raise precondition_failed(f"{kind.capitalize()} name is not valid: {exc.message}") from None


def namespace_name(tenant: str, namespace: str) -> str:
    return f"{check_name('tenant', tenant)}/{check_name('namespace', namespace)}"


def topic_name(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        return TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as exc:
        raise precondition_failed(f"Topic name is not valid: {exc.message}") from None


def tenant_in(store: BrokerMetadataStore, tenant: str) -> dict[str, Any]:
    """The tenant's record; 404 when it does not exist (a call of :func:`in_store`)."""
    info = store.get_tenant(tenant)
    if info is None:
        raise not_found("Tenant does not exist")
    return info


def namespace_in(store: BrokerMetadataStore, namespace: str) -> dict[str, Any]:
    """The namespace's policies; 404 naming what does not exist (a call of :func:`in_store`)."""
    policies = store.get_namespace_policies(namespace)
    if policies is None:
        tenant = namespace.split("/", 1)[0]
        if store.get_tenant(tenant) is None:
            raise not_found("Tenant does not exist")
        raise not_found("Namespace does not exist")
    return policies


def namespaces_in(store: BrokerMetadataStore, tenant: str) -> list[str]:
    """The tenant's namespaces; 404 without the tenant."""
    tenant_in(store, tenant)
    return store.list_namespaces(tenant)


def topics_listed(rules: StoreRules, namespace: str, mode: int) -> list[str]:
    """The namespace's topics (GET_TOPICS_OF_NAMESPACE's modes); 404 without the namespace."""
    namespace_in(rules.store, namespace)
    return rules.records.list_topics(namespace, mode)


def every_namespace(store: BrokerMetadataStore) -> list[str]:
    """Every namespace of every tenant."""
    return [namespace for tenant in store.list_tenants() for namespace in store.list_namespaces(tenant)]


async def require_tenant(broker: AdminBroker, tenant: str) -> dict[str, Any]:
    name = check_name("tenant", tenant)
    return await in_store(broker, lambda store: tenant_in(store, name))


async def require_namespace(broker: AdminBroker, namespace: str) -> dict[str, Any]:
    return await in_store(broker, lambda store: namespace_in(store, namespace))


def update_namespace_in(store: BrokerMetadataStore, namespace: str,
                        change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Write ``change(policies)`` by compare-and-set on the policies' version, made again on
    what another writer (a bundle split, another request) left; 404 without the namespace,
    409 when others kept changing the policies. The policies written."""
    namespace_in(store, namespace)
    try:
        written = update_namespace_policies(store, namespace, change)
    except NotFound:
        raise not_found("Namespace does not exist") from None
    except VersionConflict as exc:
        raise conflict(f"Concurrent modification: {exc}") from None
    store.get_namespace_policies(namespace)  # read back here: loaded topics apply it from the store's cache
    return written


async def update_namespace(broker: AdminBroker, namespace: str,
                           change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """:func:`update_namespace_in` through :func:`in_store`."""
    await in_store(broker, lambda store: update_namespace_in(store, namespace, change))


def partitions_in(store: BrokerMetadataStore, name: TopicName) -> int:
    """Partitions of a partitioned topic, 0 for anything else (a call of :func:`in_store`)."""
    if name.partition_index >= 0:
        return 0
    return store.get_partitioned_topic(str(name)) or 0


async def partition_count(broker: AdminBroker, name: TopicName) -> int:
    return await in_store(broker, lambda store: partitions_in(store, name))


async def load_topic(broker: AdminBroker, name: TopicName) -> Topic:
    """The live topic, loading it from storage (its store calls off the event loop, as a
    producer's load makes them); 404 when it does not exist."""
    def check(store: BrokerMetadataStore) -> None:
        namespace_in(store, name.namespace_name)
        if partitions_in(store, name) > 0:
            raise RestError(404, f"Topic {name} is a partitioned topic: use its partitions "
                                 f"or the partitioned-* endpoints")
    await in_store(broker, check)
    try:
        return await broker.load_topic(name, create=False)
    except TopicNotFound:
        raise not_found("Topic not found") from None


async def topics_of(broker: AdminBroker, name: TopicName) -> list[Topic]:
    """Every partition of a partitioned topic, or the topic itself."""
    count = await partition_count(broker, name)
    if count == 0:
        return [await load_topic(broker, name)]
    return [await load_topic(broker, name.partition(i)) for i in range(count)]


def require_subscription(topic: Topic, subscription: str) -> Subscription:
    sub = topic.subscriptions.get(subscription)
    if sub is None:
        raise not_found("Subscription not found")
    return sub


def require_persistent(name: TopicName, what: str) -> None:
    if not name.persistent:
        raise RestError(405, f"{what} on a non-persistent topic is not allowed")
