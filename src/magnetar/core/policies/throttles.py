"""The publish and dispatch rate limits a loaded topic runs with, kept in step with its
policies (Pulsar's ``publishRate``, ``dispatchRate`` and ``subscriptionDispatchRate``,
and the broker-wide ``brokerPublisherThrottlingMax*``).

Limits that did not change keep their buckets, so a policy refresh hands out no tokens.
A publish over its limit stops its connection being read for a while (the shell's
part); a dispatch over its limit waits for the broker's one timer.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.core import policies
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dispatchers.dispatch_throttle import DispatchThrottle
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.policies.rate_limit import RateLimiter
from magnetar.core.topics.topic import Topic


class PublishThrottles:
    def __init__(self, config: BrokerConfig, policies_in_force: PolicyCache) -> None:
        self._config = config
        self._policies = policies_in_force
        self.broker_limiter = RateLimiter(config.brokerPublisherThrottlingMaxMessageRate,
                                          config.brokerPublisherThrottlingMaxByteRate)

    def apply(self, topic: Topic) -> None:
        msgs, size = policies.publish_rate(self._policies.policies_of(topic.name), self._config)
        current = topic.publish_limiter
        if current is not None and current.same_limits(msgs, size):
            return
        limiter = RateLimiter(msgs, size)
        topic.publish_limiter = limiter if limiter.active else None

    def limited(self, topic: Topic) -> bool:
        """Whether a publish rate limit applies to ``topic`` at all (most sends need not ask)."""
        return self.broker_limiter.active or topic.publish_limiter is not None

    def pause_ms(self, topic: Topic, messages: int, size: int, now_ms: int) -> int:
        """How long the connection a send came on must not be read."""
        pause = self.broker_limiter.take(messages, size, now_ms) if self.broker_limiter.active else 0
        limiter = topic.publish_limiter
        if limiter is not None:
            pause = max(pause, limiter.take(messages, size, now_ms))
        return pause


def apply_dispatch_rates(topic: Topic, policies_in_force: PolicyCache, config: BrokerConfig,
                         wake_up: Callable[[DispatchThrottle, int], None]) -> None:
    """Each subscription's throttle: the topic's bucket (shared) and its own."""
    (topic_msgs, topic_bytes), (sub_msgs, sub_bytes) = policies.dispatch_rates(
        policies_in_force.policies_of(topic.name), config)
    shared = topic.dispatch_limiter
    if shared is None or not shared.same_limits(topic_msgs, topic_bytes):
        shared = topic.dispatch_limiter = RateLimiter(topic_msgs, topic_bytes)
    for sub in topic.subscriptions.values():
        dispatcher = sub.dispatcher
        current = dispatcher.throttle
        if current is not None and current.shared is shared and current.own.same_limits(sub_msgs, sub_bytes):
            continue
        if current is not None:
            current.release()
        throttle = DispatchThrottle(dispatcher, shared, RateLimiter(sub_msgs, sub_bytes), wake_up)
        dispatcher.throttle = throttle if throttle.active else None
