"""What every admin route needs: the broker, names checked as Pulsar checks them, existence checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.errors import RestError, conflict, not_found, precondition_failed
from magnetar.core.errors import InvalidTopicName, TopicNotFound
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


def require_tenant(broker: AdminBroker, tenant: str) -> dict[str, Any]:
    info = broker.metadata.get_tenant(check_name("tenant", tenant))
    if info is None:
        raise not_found("Tenant does not exist")
    return info


def require_namespace(broker: AdminBroker, namespace: str) -> dict[str, Any]:
    policies = broker.metadata.get_namespace_policies(namespace)
    if policies is None:
        tenant = namespace.split("/", 1)[0]
        if broker.metadata.get_tenant(tenant) is None:
            raise not_found("Tenant does not exist")
        raise not_found("Namespace does not exist")
    return policies


def update_namespace(broker: AdminBroker, namespace: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Write ``change(policies)`` by compare-and-set on the policies' version, made again on
    what another writer (a bundle split, another request) left; 404 without the namespace,
    409 when others kept changing the policies."""
    require_namespace(broker, namespace)
    try:
        update_namespace_policies(broker.metadata, namespace, change)
    except NotFound:
        raise not_found("Namespace does not exist") from None
    except VersionConflict as exc:
        raise conflict(f"Concurrent modification: {exc}") from None


def partition_count(broker: AdminBroker, name: TopicName) -> int:
    """Partitions of a partitioned topic, 0 for anything else."""
    if name.partition_index >= 0:
        return 0
    return broker.metadata.get_partitioned_topic(str(name)) or 0


def load_topic(broker: AdminBroker, name: TopicName) -> Topic:
    """The live topic, loading it from storage; 404 when it does not exist."""
    require_namespace(broker, name.namespace_name)
    if partition_count(broker, name) > 0:
        raise RestError(404, f"Topic {name} is a partitioned topic: use its partitions "
                             f"or the partitioned-* endpoints")
    try:
        return broker.get_topic(name, create=False)
    except TopicNotFound:
        raise not_found("Topic not found") from None


def topics_of(broker: AdminBroker, name: TopicName) -> list[Topic]:
    """Every partition of a partitioned topic, or the topic itself."""
    count = partition_count(broker, name)
    if count == 0:
        return [load_topic(broker, name)]
    return [load_topic(broker, name.partition(i)) for i in range(count)]


def require_subscription(topic: Topic, subscription: str) -> Subscription:
    sub = topic.subscriptions.get(subscription)
    if sub is None:
        raise not_found("Subscription not found")
    return sub


def require_persistent(name: TopicName, what: str) -> None:
    if not name.persistent:
        raise RestError(405, f"{what} on a non-persistent topic is not allowed")
