"""A topic's life in the broker shell: backlog quotas, inactive-topic deletion, expiring
subscriptions, termination and creation time.

The decisions are core's (:mod:`magnetar.core.policies.backlog_quota`,
:mod:`magnetar.core.policies.inactive_topics`), each check a deadline of the core's one timer;
this module reads the policies they need from the metadata store and carries out what
needs storage: deleting a topic's data and metadata, a subscription's cursor, and keeping
the creation time and the terminated position in the topic's stored properties so they
survive a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from magnetar.core import policies
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.names import TopicName
from magnetar.core.policies import InactiveTopicPolicies, backlog_quota, inactive_topics
from magnetar.core.policies.backlog_quota import BacklogQuotas
from magnetar.core.positions import Position
from magnetar.core.topics import topic_activity
from magnetar.core.topics.topic import Topic
from magnetar.server.broker_shell import BrokerShell
from magnetar.server.clock import now_ms
from magnetar.server.topic_release import TopicRelease

log = logging.getLogger("magnetar.lifecycle")

#: the topic properties (metadata store) that keep what must survive a restart
CREATED_PROPERTY = "topicCreationTimeStamp"
TERMINATED_PROPERTY = "terminatedPosition"


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
            at, lambda t: backlog_quotas_of(broker, t), topics)).start(now)
    core.sweep(config.brokerDeleteInactiveTopicsFrequencySeconds * 1000,
               lambda at, topics: delete_inactive_topics(broker, at, topics)).start(now)
    expiry_ms = max(1, round(config.subscriptionExpiryCheckIntervalInMinutes * 60_000))
    core.sweep(expiry_ms, lambda at, topics: expire_subscriptions(broker, at, topics)).start(now)


# -- backlog quotas ---------------------------------------------------------------------------
def backlog_quotas_of(broker: BrokerShell, topic: Topic) -> BacklogQuotas:
    return broker.policies.resolve(backlog_quota.resolve, topic.name)


# -- inactive topics and subscriptions ----------------------------------------------------------
def inactive_policies_of(broker: BrokerShell, topic: Topic) -> tuple[InactiveTopicPolicies, int]:
    own, namespace = broker.policies.topic_policies(topic.name), broker.policies.policies_of(topic.name)
    return (policies.inactive_topic_policies(own, namespace, broker.config),
            policies.retention(own, namespace, broker.config).retentionTimeInMinutes)


def awaits_deletion(broker: BrokerShell, topic: Topic) -> bool:
    rules, retention_minutes = inactive_policies_of(broker, topic)
    return inactive_topics.awaits_deletion(topic, rules, retention_minutes, broker.config.idleTopicUnloadSeconds)


def delete_inactive_topics(broker: LifecycleShell, now: int, topics: Sequence[Topic] | None = None) -> None:
    for topic in broker.core.inactive_topics(now, lambda t: inactive_policies_of(broker, t), topics):
        name = topic.name
        if name.partition_index >= 0:
            parent = name.partitioned_topic
            count = broker.metadata.get_partitioned_topic(str(parent))
            if count is not None and not all_partitions_inactive(broker, parent, count, now):
                continue
            if count is not None:
                broker.release.background(_delete_partitioned(broker, parent, count), f"deleting inactive {parent}")
                continue
        broker.release.background(_delete(broker, name), f"deleting inactive {name}")


def all_partitions_inactive(broker: LifecycleShell, parent: TopicName, count: int, now: int) -> bool:
    """A partitioned topic is deleted as a whole, once every partition is inactive: a
    loaded one as the check sees it, one not loaded when it has no subscription (its
    backlog is not known without loading it)."""
    for index in range(count):
        key = str(parent.partition(index))
        loaded = broker.topics.get(key)
        if loaded is None:
            if broker.metadata.list_cursors(key):
                return False
            continue
        policies, retention = inactive_policies_of(broker, loaded)
        if not inactive_topics.due_for_deletion(loaded, policies, retention, now):
            return False
    return True


async def _delete(broker: LifecycleShell, name: TopicName) -> None:
    topic = broker.topics.get(str(name))
    if topic is None or not _still_inactive(broker, topic):
        return
    log.info("deleting %s: inactive for the configured time", name)
    await broker.release.delete_topic(name)


async def _delete_partitioned(broker: LifecycleShell, parent: TopicName, count: int) -> None:
    for index in range(count):
        loaded = broker.topics.get(str(parent.partition(index)))
        if loaded is not None and not _still_inactive(broker, loaded):
            return
    log.info("deleting partitioned topic %s: every partition inactive for the configured time", parent)
    await broker.release.delete_partitioned_topic(parent, count)


def _still_inactive(broker: LifecycleShell, topic: Topic) -> bool:
    """A client may have come between the check and the deletion: then the topic lives."""
    policies, _ = inactive_policies_of(broker, topic)
    return not inactive_topics.is_active(topic, policies.inactiveTopicDeleteMode)


def expire_subscriptions(broker: LifecycleShell, now: int, topics: Sequence[Topic] | None = None) -> None:
    def minutes_of(topic: Topic) -> float:
        return inactive_topics.subscription_expiration_minutes(broker.policies.policies_of(topic.name), broker.config)
    for topic, sub in broker.core.expired_subscriptions(now, minutes_of, topics):
        log.info("deleting subscription %s of %s: no consumer for the expiration time", sub.name, topic.name)
        broker.delete_subscription(topic, sub.name)


# -- creation time and termination -----------------------------------------------------------------
def restore(broker: BrokerShell, topic: Topic) -> None:
    """A loaded topic's creation time (recorded on first load) and terminated position."""
    key = str(topic.name)
    properties = broker.metadata.get_topic(key)
    if properties is None:
        topic.created_ms = now_ms()
        return
    created = properties.get(CREATED_PROPERTY)
    if isinstance(created, int):
        topic.created_ms = created
    else:
        topic.created_ms = now_ms()
        broker.metadata.update_topic_properties(key, {**properties, CREATED_PROPERTY: topic.created_ms})
    terminated = properties.get(TERMINATED_PROPERTY)
    if isinstance(terminated, list) and len(terminated) == 2:
        topic.terminated_at = Position(int(terminated[0]), int(terminated[1]))


def terminate(broker: LifecycleShell, name: TopicName) -> Position:
    """Terminate a persistent topic; its last message id. Stored before it is answered."""
    topic = broker.get_topic(name, create=False)
    last = topic_activity.terminate(topic)
    key = str(name)
    properties = broker.metadata.get_topic(key) or {}
    broker.metadata.update_topic_properties(key, {**properties, TERMINATED_PROPERTY: [last.ledger_id, last.entry_id]})
    return last
