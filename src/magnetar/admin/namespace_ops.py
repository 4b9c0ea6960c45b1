"""Deleting topics the way the admin API does: partitions with their parent, namespaces whole."""

from __future__ import annotations

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.store_access import in_store
from magnetar.core.names import TopicName


async def topics_in_namespace(broker: AdminBroker, namespace: str) -> list[str]:
    """Non-partitioned topics and partitions, stored or live (non-persistent ones are live only)."""
    names = set(await in_store(broker, lambda store: store.list_topics(namespace)))
    names.update(key for key, topic in broker.topics.items() if topic.name.namespace_name == namespace)
    return sorted(names)


async def partitioned_in_namespace(broker: AdminBroker, namespace: str) -> dict[str, int]:
    """The namespace's partitioned topics and their partition counts."""
    return await in_store(broker, lambda store: store.list_partitioned_topics(namespace))


async def delete_namespace_contents(broker: AdminBroker, namespace: str) -> None:
    """Delete every topic of the namespace, partitioned ones included."""
    for parent, partitions in (await partitioned_in_namespace(broker, namespace)).items():
        await broker.release.delete_partitioned_topic(TopicName.parse(parent), partitions)
    for key in await topics_in_namespace(broker, namespace):
        await broker.release.delete_topic(TopicName.parse(key))
