"""Deleting topics the way the admin API does: partitions with their parent, namespaces whole."""

from __future__ import annotations

from magnetar.admin.admin_broker import AdminBroker
from magnetar.core.names import TopicName


def topics_in_namespace(broker: AdminBroker, namespace: str) -> list[str]:
    """Non-partitioned topics and partitions, stored or live (non-persistent ones are live only)."""
    names = set(broker.metadata.list_topics(namespace))
    names.update(key for key, topic in broker.topics.items() if topic.name.namespace_name == namespace)
    return sorted(names)


async def delete_namespace_contents(broker: AdminBroker, namespace: str) -> None:
    """Delete every topic of the namespace, partitioned ones included."""
    for parent, partitions in broker.metadata.list_partitioned_topics(namespace).items():
        await broker.release.delete_partitioned_topic(TopicName.parse(parent), partitions)
    for key in topics_in_namespace(broker, namespace):
        await broker.release.delete_topic(TopicName.parse(key))
