"""A topic's life in the broker shell: backlog quotas, inactive-topic deletion, expiring
subscriptions and termination (a topic's creation time is recorded as it opens,
:mod:`.topic_opening`).

The decisions are core's (:mod:`magnetar.core.policies.lifecycle_checks`,
:mod:`magnetar.core.topics.topic_properties`), each check a deadline of the core's one
timer; this module carries out what needs storage: deleting a topic's data and metadata,
a subscription's cursor, and reading and writing the topic's stored properties.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.policies.lifecycle_checks import (
    all_partitions_inactive,
    backlog_quotas_of,
    inactive_policies_of,
    still_inactive,
    subscription_expiration_minutes_of,
)
from magnetar.core.positions import Position
from magnetar.core.topics import topic_activity, topic_properties
from magnetar.core.topics.topic import Topic
from magnetar.server.broker_shell import BrokerShell
from magnetar.server.topic_release import TopicRelease
from magnetar.storage.metadata_calls import metadata_call

log = logging.getLogger("magnetar.lifecycle")


class LifecycleShell(BrokerShell, Protocol):
    """What the periodic checks use of the broker service."""

    core: BrokerCore
    release: TopicRelease

    def get_topic(self, name: TopicName, create: bool) -> Topic: ...

    def delete_subscription(self, topic: Topic, name: str) -> None: ...


def start(broker: LifecycleShell, now: int) -> None:
    """The periodic checks, as owners of the core's one timer."""
    config = broker.config
    core = broker.core
    if config.backlogQuotaCheckEnabled:
        core.sweep(config.backlogQuotaCheckIntervalInSeconds * 1000, lambda at, topics: core.check_backlog_quotas(
            at, lambda t: backlog_quotas_of(broker.policies, t.name), topics)).start(now)
    core.sweep(config.brokerDeleteInactiveTopicsFrequencySeconds * 1000,
               lambda at, topics: delete_inactive_topics(broker, at, topics)).start(now)
    expiry_ms = max(1, round(config.subscriptionExpiryCheckIntervalInMinutes * 60_000))
    core.sweep(expiry_ms, lambda at, topics: expire_subscriptions(broker, at, topics)).start(now)


# -- inactive topics and subscriptions ----------------------------------------------------------
def delete_inactive_topics(broker: LifecycleShell, now: int, topics: Sequence[Topic] | None = None) -> None:
    for topic in broker.core.inactive_topics(now, lambda t: inactive_policies_of(broker.policies, t.name), topics):
        name = topic.name
        if name.partition_index >= 0:
            broker.release.background(_delete_inactive_partition(broker, name, now),
                                      f"deleting inactive {name.partitioned_topic}")
        else:
            broker.release.background(_delete(broker, name), f"deleting inactive {name}")


async def _delete_inactive_partition(broker: LifecycleShell, name: TopicName, now: int) -> None:
    """A partitioned topic goes as a whole, once every partition is inactive; what the
    check needs of the store (the partition count, which partitions have stored cursors) is
    read off the event loop."""
    parent = name.partitioned_topic

    def stored(store: BrokerMetadataStore) -> tuple[int | None, set[str]]:
        count = store.get_partitioned_topic(str(parent))
        keys = [str(parent.partition(index)) for index in range(count or 0)]
        return count, {key for key in keys if store.list_cursors(key)}
    count, with_cursors = await metadata_call(broker, stored)
    if count is None:
        await _delete(broker, name)
    elif all_partitions_inactive(broker.policies, parent, count, now, broker.topics, with_cursors.__contains__):
        await _delete_partitioned(broker, parent, count)


async def _delete(broker: LifecycleShell, name: TopicName) -> None:
    topic = broker.topics.get(str(name))
    if topic is None or not still_inactive(broker.policies, topic):
        return
    log.info("deleting %s: inactive for the configured time", name)
    await broker.release.delete_topic(name)


async def _delete_partitioned(broker: LifecycleShell, parent: TopicName, count: int) -> None:
    for index in range(count):
        loaded = broker.topics.get(str(parent.partition(index)))
        if loaded is not None and not still_inactive(broker.policies, loaded):
            return
    log.info("deleting partitioned topic %s: every partition inactive for the configured time", parent)
    await broker.release.delete_partitioned_topic(parent, count)


def expire_subscriptions(broker: LifecycleShell, now: int, topics: Sequence[Topic] | None = None) -> None:
    def minutes_of(topic: Topic) -> float:
        return subscription_expiration_minutes_of(broker.policies, broker.config, topic)
    for topic, sub in broker.core.expired_subscriptions(now, minutes_of, topics):
        log.info("deleting subscription %s of %s: no consumer for the expiration time", sub.name, topic.name)
        broker.delete_subscription(topic, sub.name)


# -- termination ---------------------------------------------------------------------------------
async def terminate(broker: LifecycleShell, name: TopicName) -> Position:
    """Terminate a loaded persistent topic; its last message id. Stored before it is
    answered, off the event loop on a cluster's store."""
    topic = broker.get_topic(name, create=False)
    last = topic_activity.terminate(topic)
    key = str(name)
    await metadata_call(broker, lambda store: store.update_topic_properties(
        key, topic_properties.terminated(store.get_topic(key), last)))
    return last
