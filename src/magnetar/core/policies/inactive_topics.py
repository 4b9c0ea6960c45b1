"""Deleting topics nobody uses and subscriptions nobody reads (Pulsar's
``PersistentTopic.checkGC`` and ``checkInactiveSubscriptions``).

A topic is *active* while it has producers or consumers (the same notion the idle-topic
unload uses, :meth:`Topic.has_clients`) or, by the delete mode, any subscription
(``delete_when_no_subscriptions``) or any subscription with a backlog
(``delete_when_subscriptions_caught_up``). One inactive for ``maxInactiveDurationSeconds``
as seen by the periodic check is deleted, data and metadata, unless its retention time
is unlimited. A subscription without consumers for the expiration time is deleted.
"""

from __future__ import annotations

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.policies import InactiveTopicPolicies, Policies
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import topic_activity
from magnetar.core.topics.topic import Topic

NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"


def subscription_expiration_minutes(policies: Policies, config: BrokerConfig) -> float:
    configured = policies.subscription_expiration_time_minutes
    return config.subscriptionExpirationTimeMinutes if configured is None else configured


def is_active(topic: Topic, mode: str) -> bool:
    if topic_activity.has_clients(topic) or topic.pending_receipts:
        return True
    if mode == NO_SUBSCRIPTIONS:
        return bool(topic.subscriptions)
    return any(sub.backlog() > 0 for sub in topic.subscriptions.values())


def inactive_for(topic: Topic, policies: InactiveTopicPolicies, now_ms: int) -> int:
    """How long the check has seen the topic inactive (0 while active); the clock starts
    at the first check that finds it so, as Pulsar's ``lastActive``."""
    if is_active(topic, policies.inactiveTopicDeleteMode):
        topic.inactive_since_ms = None
        return 0
    if topic.inactive_since_ms is None:
        topic.inactive_since_ms = now_ms
    return now_ms - topic.inactive_since_ms


def awaits_deletion(topic: Topic, policies: InactiveTopicPolicies, retention_minutes: int,
                    idle_unload_s: int) -> bool:
    """Whether an idle topic is left loaded for the deletion check rather than unloaded: an
    unloaded topic is not checked (as in Pulsar), so whichever of the two comes first for an
    idle topic happens, deletion (``maxInactiveDurationSeconds``) or unloading
    (``idleTopicUnloadSeconds``)."""
    return policies.deleteWhileInactive and topic.name.persistent and retention_minutes == 0 \
        and policies.maxInactiveDurationSeconds <= idle_unload_s \
        and not is_active(topic, policies.inactiveTopicDeleteMode)


def due_for_deletion(topic: Topic, policies: InactiveTopicPolicies, retention_minutes: int, now_ms: int) -> bool:
    """Whether to delete the topic now. For a persistent topic, unlimited retention (-1)
    keeps it, as Pulsar's ``shouldTopicBeRetained``, and a limited one keeps it for that long
    after it was last active; a non-persistent topic keeps nothing to retain."""
    if not policies.deleteWhileInactive:
        return False
    idle_ms = inactive_for(topic, policies, now_ms)
    if idle_ms <= 0 or idle_ms < policies.maxInactiveDurationSeconds * 1000:
        return False
    if not topic.name.persistent:
        return True
    return retention_minutes >= 0 and idle_ms >= retention_minutes * 60_000


def expired_subscriptions(topic: Topic, expiration_minutes: float, now_ms: int) -> list[Subscription]:
    """Durable subscriptions without consumers whose last activity is older than the
    expiration time (0: subscriptions never expire)."""
    if expiration_minutes <= 0:
        return []
    limit_ms = expiration_minutes * 60_000
    expired = []
    for sub in topic.subscriptions.values():
        if sub.last_active_ms == 0:
            sub.last_active_ms = now_ms  # loaded or created without a consumer: its clock starts now
        elif sub.durable and not sub.consumers and now_ms - sub.last_active_ms > limit_ms:
            expired.append(sub)
    return expired
