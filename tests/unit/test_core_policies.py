"""Policies resolved as Pulsar 4.x does: the topic's own, else the namespace's, else config."""

from __future__ import annotations

from magnetar.config import BrokerConfig
from magnetar.core import policies
from magnetar.core.policies import Policies, TopicPolicies

NONE = TopicPolicies()


def test_auto_topic_creation_follows_the_namespace_override_else_the_config() -> None:
    config = BrokerConfig(allowAutoTopicCreation=True, allowAutoTopicCreationType="non-partitioned",
                          defaultNumPartitions=1)
    assert policies.auto_topic_creation(Policies(), config) == (True, "non-partitioned", 1)
    off = Policies.model_validate({"autoTopicCreationOverride": {"allowAutoTopicCreation": False}})
    assert policies.auto_topic_creation(off, config)[0] is False
    partitioned = Policies.model_validate({"autoTopicCreationOverride": {
        "allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4}})
    assert policies.auto_topic_creation(partitioned, config) == (True, "partitioned", 4)


def test_delayed_delivery_policy_over_config() -> None:
    config = BrokerConfig(delayedDeliveryEnabled=True, delayedDeliveryMaxDelayInMillis=1000)
    assert policies.delayed_delivery_active(NONE, Policies(), config)
    assert policies.max_delivery_delay_ms(NONE, Policies(), config) == 1000
    ns = Policies.model_validate({"delayed_delivery_policies": {"active": False, "maxDeliveryDelayInMillis": 50}})
    assert not policies.delayed_delivery_active(NONE, ns, config)
    assert policies.max_delivery_delay_ms(NONE, ns, config) == 50


def test_deduplication_topic_over_namespace_over_config() -> None:
    config = BrokerConfig(brokerDeduplicationEnabled=False)
    ns_on = Policies(deduplicationEnabled=True)
    assert policies.deduplication_enabled(NONE, Policies(), config) is False
    assert policies.deduplication_enabled(NONE, ns_on, config) is True
    assert policies.deduplication_enabled(TopicPolicies(deduplicationEnabled=False), ns_on, config) is False


def test_property_deduplication_namespace_policy_or_broker_default() -> None:
    config = BrokerConfig(brokerPropertyDeduplicationEnabled=True, brokerPropertyDeduplicationWindowSeconds=30)
    default = policies.property_deduplication(Policies(), config)
    assert default is not None and default.windowSeconds == 30
    ns = Policies.model_validate({"propertyDeduplication": {"enabled": False}})
    assert policies.property_deduplication(ns, config) is None
    assert policies.property_deduplication(Policies(), BrokerConfig()) is None


def test_a_stored_field_the_model_refuses_is_dropped_not_fatal() -> None:
    read = policies.read_stored({"deduplicationEnabled": "yes", "max_producers_per_topic": 3, "custom": 1})
    assert read.deduplicationEnabled is None
    assert read.max_producers_per_topic == 3
