"""Pulsar's per-topic, per-subscription and per-namespace limits, with Pulsar's errors.

A limit resolves as Pulsar resolves it: the topic policy when set, else the namespace
policy, else the broker setting; 0 means no limit at any level. Checks run before anything is changed, so
a refused request leaves no trace.
"""

from __future__ import annotations

from magnetar.core import policies as resolve
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import ConsumerBusy, LimitReached, NotAllowed, ProducerBusy
from magnetar.core.policies import Policies, TopicPolicies
from magnetar.core.topics.topic import Topic


def resolved(policy_value: int | None, broker_value: int) -> int:
    return broker_value if policy_value is None else policy_value


def _reached(count: int, limit: int) -> bool:
    return limit > 0 and count >= limit


def check_new_producer(topic: Topic, topic_policies: TopicPolicies, policies: Policies,
                       config: BrokerConfig) -> None:
    limit = resolve.max_producers(topic_policies, policies, config)
    if _reached(len(topic.producers), limit):
        raise ProducerBusy(f"Topic {topic.name} reached max producers limit ({limit})")


def check_new_consumer(topic: Topic, subscription: str, topic_policies: TopicPolicies, policies: Policies,
                       config: BrokerConfig) -> None:
    """Pulsar checks the topic, then the subscription, then whether a new subscription
    may be made."""
    topic_limit = resolve.max_consumers(topic_policies, policies, config)
    if _reached(sum(len(s.consumers) for s in topic.subscriptions.values()), topic_limit):
        raise ConsumerBusy("Topic reached max consumers limit")
    sub = topic.subscriptions.get(subscription)
    if sub is not None:
        if _reached(len(sub.consumers), resolve.max_consumers_per_subscription(topic_policies, policies, config)):
            raise ConsumerBusy("Subscription reached max consumers limit")
        return
    sub_limit = resolved(policies.max_subscriptions_per_topic, config.maxSubscriptionsPerTopic)
    if _reached(len(topic.subscriptions), sub_limit):
        raise NotAllowed("Topic reached max subscriptions limit")


def check_new_topic(namespace: str, existing_topics: int, policies: Policies, config: BrokerConfig) -> None:
    """Partitions count one each, as in Pulsar."""
    limit = resolved(policies.max_topics_per_namespace, config.maxTopicsPerNamespace)
    if _reached(existing_topics, limit):
        raise LimitReached(f"Exceed maximum number of topics in namespace {namespace} ({limit})")


def check_connection_clients(held: int, config: BrokerConfig) -> None:
    """One connection's producers and consumers: one client cannot load the broker with
    an unbounded number of topics through a single socket."""
    limit = config.maxProducersAndConsumersPerConnection
    if _reached(held, limit):
        raise NotAllowed(f"This connection reached its limit of {limit} producers and consumers")


def connection_refusal(open_connections: int, from_same_ip: int, config: BrokerConfig) -> str | None:
    """Why a new connection is refused (``brokerMaxConnections``, ``brokerMaxConnectionsPerIp``),
    or None; the counts are of connections already open."""
    if _reached(open_connections, config.brokerMaxConnections):
        return f"Reached the maximum number of connections ({config.brokerMaxConnections})"
    if _reached(from_same_ip, config.brokerMaxConnectionsPerIp):
        return f"Reached the maximum number of connections from one address ({config.brokerMaxConnectionsPerIp})"
    return None
