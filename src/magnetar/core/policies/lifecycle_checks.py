"""The policies a topic's periodic checks apply, resolved for one topic, and what they decide
about it: its backlog quotas, when it counts as inactive, whether a partitioned topic may be
deleted as a whole, when its subscriptions expire.

The checks run on the broker's one timer (see ``magnetar.server.topic_lifecycle``, which
carries out the deletions); the admin stats and ``/metrics`` read the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies import InactiveTopicPolicies, Policies, TopicPolicies, backlog_quota, inactive_topics
from magnetar.core.policies import inactive_topic_policies as inactive_rules
from magnetar.core.policies import retention as retention_rules
from magnetar.core.policies.backlog_quota import BacklogQuotas
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.topics.topic import Topic


def backlog_quotas_of(policies: PolicyCache, name: TopicName) -> BacklogQuotas:
    return policies.resolve(backlog_quota.resolve, name)


def _inactive_rules(own: TopicPolicies, namespace: Policies, config: BrokerConfig) -> tuple[InactiveTopicPolicies, int]:
    return inactive_rules(own, namespace, config), retention_rules(own, namespace, config).retentionTimeInMinutes


def inactive_policies_of(policies: PolicyCache, name: TopicName) -> tuple[InactiveTopicPolicies, int]:
    """The topic's inactive-topic policies and its retention time in minutes."""
    return policies.resolve(_inactive_rules, name)


def awaits_deletion(policies: PolicyCache, config: BrokerConfig, topic: Topic) -> bool:
    """The inactive-topic check will delete it: the idle unload leaves it loaded for that."""
    rules, retention_minutes = inactive_policies_of(policies, topic.name)
    return inactive_topics.awaits_deletion(topic, rules, retention_minutes, config.idleTopicUnloadSeconds)


def still_inactive(policies: PolicyCache, topic: Topic) -> bool:
    """A client may have come between the check and the deletion: then the topic lives."""
    rules, _ = inactive_policies_of(policies, topic.name)
    return not inactive_topics.is_active(topic, rules.inactiveTopicDeleteMode)


def all_partitions_inactive(policies: PolicyCache, parent: TopicName, count: int, now_ms: int,
                            loaded: Mapping[str, Topic], has_cursors: Callable[[str], bool]) -> bool:
    """A partitioned topic is deleted as a whole, once every partition is inactive: a
    loaded one as the check sees it, one not loaded when it has no subscription (its
    backlog is not known without loading it; ``has_cursors`` reads the stored ones)."""
    for index in range(count):
        key = str(parent.partition(index))
        topic = loaded.get(key)
        if topic is None:
            if has_cursors(key):
                return False
            continue
        rules, retention_minutes = inactive_policies_of(policies, topic.name)
        if not inactive_topics.due_for_deletion(topic, rules, retention_minutes, now_ms):
            return False
    return True


def subscription_expiration_minutes_of(policies: PolicyCache, config: BrokerConfig, topic: Topic) -> float:
    return inactive_topics.subscription_expiration_minutes(policies.policies_of(topic.name), config)
