"""Policies resolved as Pulsar 4.x does: the topic's own, else the namespace's, else config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from magnetar.core import policies
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.policies import Policies, RetentionPolicies, TopicPolicies

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


def test_every_resolver_takes_the_topic_then_the_namespace_then_the_broker() -> None:
    config = BrokerConfig(maxProducersPerTopic=1, maxConsumersPerTopic=2, maxConsumersPerSubscription=3,
                          maxUnackedMessagesPerConsumer=4, maxUnackedMessagesPerSubscription=5,
                          ttlDurationDefaultInSeconds=6, brokerServiceCompactionThresholdInBytes=7,
                          defaultRetentionTimeInMinutes=8, defaultRetentionSizeInMB=-1)
    namespace = Policies(max_producers_per_topic=11, max_consumers_per_topic=12, max_consumers_per_subscription=13,
                         max_unacked_messages_per_consumer=14, max_unacked_messages_per_subscription=15,
                         message_ttl_in_seconds=16, compaction_threshold=17,
                         retention_policies=RetentionPolicies(retentionTimeInMinutes=18, retentionSizeInMB=1))
    topic = TopicPolicies(maxProducerPerTopic=21, maxConsumerPerTopic=22, maxConsumersPerSubscription=23,
                          maxUnackedMessagesOnConsumer=24, maxUnackedMessagesOnSubscription=25,
                          messageTTLInSeconds=26, compactionThreshold=27,
                          retentionPolicies=RetentionPolicies(retentionTimeInMinutes=28, retentionSizeInMB=2))
    resolvers = (policies.max_producers, policies.max_consumers, policies.max_consumers_per_subscription,
                 policies.max_unacked_on_consumer, policies.max_unacked_on_subscription, policies.message_ttl_s,
                 policies.compaction_threshold)
    assert [r(NONE, Policies(), config) for r in resolvers] == [1, 2, 3, 4, 5, 6, 7]
    assert [r(NONE, namespace, config) for r in resolvers] == [11, 12, 13, 14, 15, 16, 17]
    assert [r(topic, namespace, config) for r in resolvers] == [21, 22, 23, 24, 25, 26, 27]
    assert policies.retention(NONE, Policies(), config).retentionTimeInMinutes == 8
    assert policies.retention(NONE, namespace, config).retentionTimeInMinutes == 18
    assert policies.retention(topic, namespace, config).retentionTimeInMinutes == 28
    assert policies.max_producers(TopicPolicies(maxProducerPerTopic=0), namespace, config) == 0, "0 is a value"


def test_schema_strategy_undefined_falls_through_and_backlog_quotas_resolve_per_type() -> None:
    config = BrokerConfig(schemaCompatibilityStrategy="FORWARD", backlogQuotaDefaultLimitBytes=100)
    assert policies.schema_compatibility_strategy(NONE, Policies(schema_compatibility_strategy="UNDEFINED"),
                                                  config) == "FORWARD"
    assert policies.schema_compatibility_strategy(TopicPolicies(schemaCompatibilityStrategy="BACKWARD"),
                                                  Policies(), config) == "BACKWARD"
    namespace = Policies.model_validate({"backlog_quota_map": {"message_age": {"limitTime": 60}}})
    topic = TopicPolicies.model_validate({"backLogQuotaMap": {"destination_storage": {"limitSize": 5}}})
    quotas = policies.backlog_quotas(topic, namespace, config)
    assert quotas["destination_storage"].limitSize == 5 and quotas["message_age"].limitTime == 60
    assert policies.backlog_quotas(NONE, Policies(), config)["destination_storage"].limitSize == 100


def test_a_single_zero_retention_limit_is_refused_as_pulsar_refuses_it() -> None:
    with pytest.raises(ValidationError, match="Setting a single time or size limit to 0"):
        RetentionPolicies(retentionTimeInMinutes=5, retentionSizeInMB=0)
    assert RetentionPolicies(retentionTimeInMinutes=0, retentionSizeInMB=0).retentionSizeInMB == 0
    assert RetentionPolicies(retentionTimeInMinutes=-1, retentionSizeInMB=3).retentionTimeInMinutes == -1
