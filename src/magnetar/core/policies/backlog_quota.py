"""Backlog quotas: how much (``destination_storage``) and how old (``message_age``) a
topic's backlog may grow, and what the broker does past it (Pulsar's
``BacklogQuotaManager`` and ``PersistentTopic.checkBacklogQuotaExceeded``).

Pulsar 4.x's behaviour, which this follows:

- ``producer_request_hold`` and ``producer_exception``: the periodic check disconnects
  the topic's producers (CLOSE_PRODUCER). A producer (new, or one reconnecting) is refused
  while the quota is exceeded: ``ProducerBlockedQuotaExceededError`` for hold, which the
  clients retry until their send timeout, and ``ProducerBlockedQuotaExceededException``
  for exception, which fails the pending sends. Sends on a producer that is still
  attached are not checked one by one.
- ``consumer_backlog_eviction``: the slowest subscriptions are moved forward until the
  backlog is under 90% of the size limit, or its messages older than 90% of the time limit
  are expired on every subscription (Pulsar's precise time-based check; Magnetar's
  ledgers are too large for the per-ledger variant to be useful).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import BrokerError, ServerError
from magnetar.core.policies import BacklogQuota, Policies, TopicPolicies, backlog_quotas, message_expiry
from magnetar.core.subscriptions import cursor_moves
from magnetar.core.topics.backlog import OldestBacklog, backlog_size_bytes, oldest_backlog, topic_backlog_bytes
from magnetar.core.topics.topic import Topic, slowest_mark_delete

#: eviction aims below the limit, so the next message does not exceed it again at once
EVICTION_TARGET = 0.9
HOLD = "producer_request_hold"
EVICTION = "consumer_backlog_eviction"
#: Pulsar's message for a refused producer
REFUSAL_MESSAGE = "Cannot create producer on topic with backlog quota exceeded"


@dataclass(frozen=True)
class QuotaLimit:
    """One quota: its limit (bytes or seconds; -1 none) and what happens past it."""

    limit: int
    policy: str

    @property
    def active(self) -> bool:
        return self.limit >= 0


@dataclass(frozen=True)
class BacklogQuotas:
    size: QuotaLimit
    time: QuotaLimit


def resolve(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> BacklogQuotas:
    """The quotas that apply, type by type (:func:`magnetar.core.policies.backlog_quotas`:
    the topic's, else the namespace's, else the broker's ``backlogQuotaDefault*``)."""
    chosen = backlog_quotas(topic, policies, config)
    size, time = chosen["destination_storage"], chosen["message_age"]
    default = config.backlogQuotaDefaultRetentionPolicy
    return BacklogQuotas(QuotaLimit(_size_of(size), size.policy or default),
                         QuotaLimit(-1 if time.limitTime is None else time.limitTime, time.policy or default))


def _size_of(quota: BacklogQuota) -> int:
    """``limitSize``, else the older ``limit`` field Pulsar still accepts."""
    if quota.limitSize is not None:
        return quota.limitSize
    return quota.limit if quota.limit is not None else -1


def size_exceeded(topic: Topic, quota: QuotaLimit) -> bool:
    if not quota.active:
        return False
    backlog = topic_backlog_bytes(topic)
    return backlog > 0 and backlog >= quota.limit


def time_exceeded(oldest: OldestBacklog | None, quota: QuotaLimit, now_ms: int) -> bool:
    return quota.limit > 0 and oldest is not None and now_ms - oldest.publish_time_ms > quota.limit * 1000


def producer_refusal(topic: Topic, quotas: BacklogQuotas, now_ms: int) -> BrokerError | None:
    """Why a producer may not attach now, with Pulsar's code for the policy; None if it may."""
    exceeded = []
    if quotas.size.policy != EVICTION and size_exceeded(topic, quotas.size):
        exceeded.append(quotas.size.policy)
    if quotas.time.policy != EVICTION and time_exceeded(oldest_backlog(topic), quotas.time, now_ms):
        exceeded.append(quotas.time.policy)
    if not exceeded:
        return None
    code = ServerError.ProducerBlockedQuotaExceededError if exceeded[0] == HOLD \
        else ServerError.ProducerBlockedQuotaExceededException
    return BrokerError(REFUSAL_MESSAGE, code)


def enforce(topic: Topic, quotas: BacklogQuotas, now_ms: int) -> None:
    """The periodic check of one topic: apply the policy of each quota it exceeds."""
    if size_exceeded(topic, quotas.size):
        _apply(topic, quotas.size, "size", now_ms)
    if time_exceeded(oldest_backlog(topic), quotas.time, now_ms):
        _apply(topic, quotas.time, "time", now_ms)


def _apply(topic: Topic, quota: QuotaLimit, kind: str, now_ms: int) -> None:
    if quota.policy != EVICTION:
        disconnect_producers(topic)
        return
    if kind == "size":
        evict_for_size(topic, quota.limit)
    else:
        evict_for_time(topic, quota.limit, now_ms)
    topic.quota_evictions[kind] += 1


def disconnect_producers(topic: Topic) -> None:
    """Close the topic's producers; they reconnect and are refused while over quota."""
    for producer in list(topic.producers.values()):
        topic.remove_producer(producer)
        producer.sink.close_producer(producer.producer_id)


def evict_for_size(topic: Topic, limit_bytes: int) -> None:
    """Skip entries on the slowest subscription, in proportion to the excess, until the
    backlog is under the target or the slowest subscription does not move (Pulsar's
    ``dropBacklogForSizeLimit``, whose count is rounded down; rounded up here, so a
    backlog just over the quota loses at least one entry)."""
    target = EVICTION_TARGET * limit_bytes
    backlog = topic_backlog_bytes(topic)
    previous = None
    while backlog > target:
        durable = [s for s in topic.subscriptions.values() if s.durable]
        if not durable:
            return
        slowest = min(durable, key=lambda s: s.cursor.mark_delete)
        if slowest is previous:
            return
        # rounded up, so equal-sized entries end at or under the target in one step
        to_skip = math.ceil((backlog - target) / backlog * slowest.backlog())
        if to_skip <= 0:
            return
        cursor_moves.skip_messages(slowest, to_skip)
        backlog = backlog_size_bytes(topic, slowest_mark_delete(topic) or slowest.cursor.mark_delete)
        previous = slowest


def evict_for_time(topic: Topic, limit_s: int, now_ms: int) -> None:
    """Expire, on every subscription, the messages older than 90% of the limit."""
    target_s = int(EVICTION_TARGET * limit_s)
    for sub in list(topic.subscriptions.values()):
        if sub.durable:
            message_expiry.expire(sub, target_s, now_ms)
