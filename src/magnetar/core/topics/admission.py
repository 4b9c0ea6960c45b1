"""Whether a new producer or consumer may attach to a loaded topic now.

In Pulsar's order: a topic still recovering its deduplication state takes no producer
yet (it could not judge its sequence ids); then the limits on producers and consumers
(topic, namespace, broker); then a terminated topic or one over its backlog quota
(``producer_request_hold`` / ``producer_exception``) refuses producers. A namespace may
also allow only some subscription types.
"""

from __future__ import annotations

from magnetar.core.dedup.message_deduplication import DedupStatus
from magnetar.core.errors import NotAllowed, ServiceNotReady, TopicTerminated
from magnetar.core.policies import backlog_quota, limits
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.topics.topic import Topic


def check_producer(topic: Topic, policies: PolicyCache, now_ms: int) -> None:
    if topic.dedup is not None and topic.dedup.status is DedupStatus.RECOVERING:
        raise ServiceNotReady(f"Topic {topic.name} is recovering its deduplication state")
    policies.resolve(lambda own, namespace, config: limits.check_new_producer(topic, own, namespace, config),
                     topic.name)
    if topic.terminated_at is not None:
        raise TopicTerminated(f"Topic {topic.name} was already terminated")
    if topic.name.persistent:
        refusal = backlog_quota.producer_refusal(topic, policies.resolve(backlog_quota.resolve, topic.name), now_ms)
        if refusal is not None:
            raise refusal


def check_consumer(topic: Topic, subscription: str, sub_type: str, policies: PolicyCache) -> None:
    enabled = policies.policies_of(topic.name).subscription_types_enabled
    if enabled and sub_type not in enabled:
        raise NotAllowed(f"Subscription type {sub_type} is not enabled on namespace {topic.name.namespace_name}")
    policies.resolve(lambda own, namespace, config: limits.check_new_consumer(topic, subscription, own, namespace,
                                                                              config), topic.name)


def last_sequence_id(topic: Topic, producer_name: str) -> int:
    """The producer's last stored sequence id as PRODUCER_SUCCESS tells it (-1 without
    deduplication), so a reconnecting producer goes on from there."""
    if topic.dedup is None:
        return -1
    return int(topic.dedup.last_sequence_id(producer_name))
