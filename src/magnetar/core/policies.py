"""Namespace policies, one typed model, and how the broker resolves what applies.

The model is Pulsar's ``Policies`` JSON (``deduplicationEnabled``, ``retention_policies``,
``delayed_delivery_policies``, ``autoTopicCreationOverride``, ...): the admin API
validates request bodies with it, the metadata store keeps what was set, and the broker
reads stored policies back through it, so no code guesses at the shape of a dict.
Resolution follows Pulsar 4.x: a topic's own policy, else its namespace's, else the
broker's config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from magnetar.core.authorization import AuthPolicies
from magnetar.core.broker_config import BrokerConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

NonNegativeInt = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=INT64_MAX)]
SubscriptionType = Literal["Exclusive", "Shared", "Failover", "Key_Shared"]
SchemaCompatibilityStrategyName = Literal[
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"]
#: the deprecated ``schema_auto_update_compatibility_strategy`` values and what each stands for
AUTO_UPDATE_STRATEGIES: dict[str, str] = {
    "AutoUpdateDisabled": "ALWAYS_INCOMPATIBLE", "Backward": "BACKWARD", "Forward": "FORWARD", "Full": "FULL",
    "AlwaysCompatible": "ALWAYS_COMPATIBLE", "BackwardTransitive": "BACKWARD_TRANSITIVE",
    "ForwardTransitive": "FORWARD_TRANSITIVE", "FullTransitive": "FULL_TRANSITIVE"}
AutoUpdateStrategyName = Literal["AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible",
                                 "BackwardTransitive", "ForwardTransitive", "FullTransitive"]
BacklogQuotaType = Literal["destination_storage", "message_age"]


class RetentionPolicies(BaseModel):
    """How long (minutes) and how much (MB) acknowledged data is kept; -1 is unlimited."""

    model_config = ConfigDict(extra="forbid")
    retentionTimeInMinutes: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] = 0
    retentionSizeInMB: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = 0


class BacklogQuota(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] | None = None
    limitSize: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] | None = None
    limitTime: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] | None = None
    policy: Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"] | None = None


class PublishRate(BaseModel):
    """Pulsar's ``PublishRate``: -1 or 0 means no limit on that dimension."""

    model_config = ConfigDict(extra="forbid")
    publishThrottlingRateInMsg: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] = -1
    publishThrottlingRateInByte: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = -1


class DispatchRate(BaseModel):
    """Pulsar's ``DispatchRate``: -1 or 0 means no limit on that dimension; the rate is per
    ``ratePeriodInSecond`` seconds."""

    model_config = ConfigDict(extra="forbid")
    dispatchThrottlingRateInMsg: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] = -1
    dispatchThrottlingRateInByte: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = -1
    relativeToPublishRate: StrictBool = False
    ratePeriodInSecond: Annotated[StrictInt, Field(ge=1, le=86400)] = 1


class DelayedDeliveryPolicies(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tickTime: Annotated[StrictInt, Field(ge=1, le=INT64_MAX)] = 1000
    active: StrictBool = True
    maxDeliveryDelayInMillis: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0


class AutoTopicCreationOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowAutoTopicCreation: StrictBool
    topicType: Literal["partitioned", "non-partitioned"] | None = None
    defaultNumPartitions: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = None

    @model_validator(mode="after")
    def _partitions_for_partitioned(self) -> AutoTopicCreationOverride:
        if self.allowAutoTopicCreation and self.topicType is None:
            raise ValueError("topicType is required when allowAutoTopicCreation is true")
        if self.topicType == "partitioned" and self.defaultNumPartitions is None:
            raise ValueError("defaultNumPartitions must be at least 1 for the partitioned topic type")
        return self


class PropertyDeduplicationPolicy(BaseModel):
    """Magnetar's business-id deduplication window for a namespace (``propertyDeduplication``)."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool = True
    propertyName: Annotated[str, Field(min_length=1)] = "__dedup_id"
    windowSeconds: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = 600
    maxIds: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = 100_000


class Policies(BaseModel):
    """A namespace's policies on creation; fields Magnetar does not use are kept as given."""

    model_config = ConfigDict(extra="allow")
    replication_clusters: list[str] | None = None
    deduplicationEnabled: StrictBool | None = None
    autoTopicCreationOverride: AutoTopicCreationOverride | None = None
    message_ttl_in_seconds: NonNegativeInt | None = None
    retention_policies: RetentionPolicies | None = None
    delayed_delivery_policies: DelayedDeliveryPolicies | None = None
    backlog_quota_map: dict[BacklogQuotaType, BacklogQuota] | None = None
    max_producers_per_topic: NonNegativeInt | None = None
    max_consumers_per_topic: NonNegativeInt | None = None
    max_consumers_per_subscription: NonNegativeInt | None = None
    max_subscriptions_per_topic: NonNegativeInt | None = None
    #: by cluster, as Pulsar stores it
    publishMaxMessageRate: dict[str, PublishRate] | None = None
    topicDispatchRate: dict[str, DispatchRate] | None = None
    subscriptionDispatchRate: dict[str, DispatchRate] | None = None
    max_topics_per_namespace: NonNegativeInt | None = None
    max_unacked_messages_per_consumer: NonNegativeInt | None = None
    max_unacked_messages_per_subscription: NonNegativeInt | None = None
    subscription_types_enabled: list[SubscriptionType] | None = None
    properties: dict[str, str] | None = None
    propertyDeduplication: PropertyDeduplicationPolicy | None = None
    auth_policies: AuthPolicies | None = None
    subscription_auth_mode: Literal["None", "Prefix"] | None = None
    schema_compatibility_strategy: SchemaCompatibilityStrategyName | None = None
    schema_auto_update_compatibility_strategy: AutoUpdateStrategyName | None = None
    is_allow_auto_update_schema: StrictBool | None = None
    schema_validation_enforced: StrictBool | None = None


def read_stored(stored: dict[str, Any]) -> Policies:
    """The model of policies read back from the store; a field the model refuses (written by
    an older version) is dropped rather than taking the namespace down."""
    try:
        return Policies.model_validate(stored)
    except ValidationError as exc:
        bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        return Policies.model_validate({k: v for k, v in stored.items() if k not in bad})


def auto_topic_creation(policies: Policies, config: BrokerConfig) -> tuple[bool, str, int]:
    """Whether topics are created on first use, of which type, with how many partitions."""
    override = policies.autoTopicCreationOverride
    if override is None:
        return config.allowAutoTopicCreation, config.allowAutoTopicCreationType, config.defaultNumPartitions
    if not override.allowAutoTopicCreation or override.topicType is None:
        return override.allowAutoTopicCreation, config.allowAutoTopicCreationType, config.defaultNumPartitions
    return True, override.topicType, override.defaultNumPartitions or config.defaultNumPartitions


def delayed_delivery_active(policies: Policies, config: BrokerConfig) -> bool:
    policy = policies.delayed_delivery_policies
    return config.delayedDeliveryEnabled if policy is None else policy.active


def max_delivery_delay_ms(policies: Policies, config: BrokerConfig) -> int:
    """The longest delivery delay a message may ask for (0: no limit)."""
    policy = policies.delayed_delivery_policies
    if policy is not None and policy.maxDeliveryDelayInMillis:
        return policy.maxDeliveryDelayInMillis
    return config.delayedDeliveryMaxDelayInMillis


def deduplication_enabled(topic_policy: bool | None, policies: Policies, config: BrokerConfig) -> bool:
    if topic_policy is not None:
        return topic_policy
    if policies.deduplicationEnabled is not None:
        return policies.deduplicationEnabled
    return config.brokerDeduplicationEnabled


def property_deduplication(policies: Policies, config: BrokerConfig) -> PropertyDeduplicationPolicy | None:
    """The business-id window that applies, or None when off."""
    configured = policies.propertyDeduplication
    if configured is not None:
        return configured if configured.enabled else None
    if not config.brokerPropertyDeduplicationEnabled:
        return None
    return PropertyDeduplicationPolicy(propertyName=config.brokerPropertyDeduplicationPropertyName,
                                       windowSeconds=config.brokerPropertyDeduplicationWindowSeconds,
                                       maxIds=config.brokerPropertyDeduplicationMaxIdsPerTopic)


def publish_rate(policies: Policies, config: BrokerConfig) -> tuple[int, int]:
    """A topic's (messages, bytes) per second: the namespace's ``publishRate`` for this
    cluster, else the broker's ``maxPublishRatePerTopicInMessages/Bytes``; 0 is no limit."""
    rate = (policies.publishMaxMessageRate or {}).get(config.clusterName)
    if rate is None:
        return config.maxPublishRatePerTopicInMessages, config.maxPublishRatePerTopicInBytes
    return max(rate.publishThrottlingRateInMsg, 0), max(rate.publishThrottlingRateInByte, 0)


def dispatch_rates(policies: Policies, config: BrokerConfig) -> tuple[tuple[float, float], tuple[float, float]]:
    """((messages, bytes) per second for a topic, the same for each subscription): the
    namespace's ``dispatchRate`` / ``subscriptionDispatchRate`` for this cluster, else the
    broker's ``dispatchThrottlingRatePerTopic*`` / ``PerSubscription*``; 0 is no limit."""
    def per_second(rates: dict[str, DispatchRate] | None, msgs: int, size: int) -> tuple[float, float]:
        rate = (rates or {}).get(config.clusterName)
        if rate is None:
            return float(max(msgs, 0)), float(max(size, 0))
        period = rate.ratePeriodInSecond
        return max(rate.dispatchThrottlingRateInMsg, 0) / period, max(rate.dispatchThrottlingRateInByte, 0) / period
    return (per_second(policies.topicDispatchRate, config.dispatchThrottlingRatePerTopicInMsg,
                       config.dispatchThrottlingRatePerTopicInByte),
            per_second(policies.subscriptionDispatchRate, config.dispatchThrottlingRatePerSubscriptionInMsg,
                       config.dispatchThrottlingRatePerSubscriptionInByte))


def schema_compatibility_strategy(topic_policy: str | None, policies: Policies, config: BrokerConfig) -> str:
    """The strategy that applies to a topic, as Pulsar 4.x resolves it: the topic's policy,
    else the namespace's ``schema_compatibility_strategy``, else its deprecated
    ``schema_auto_update_compatibility_strategy``, else the broker's
    ``schemaCompatibilityStrategy``; UNDEFINED at a level passes to the next (FULL at the end)."""
    namespace = policies.schema_compatibility_strategy
    if namespace in (None, "UNDEFINED") and policies.schema_auto_update_compatibility_strategy is not None:
        namespace = AUTO_UPDATE_STRATEGIES[policies.schema_auto_update_compatibility_strategy]  # type: ignore[assignment]
    for level in (topic_policy, namespace, config.schemaCompatibilityStrategy):
        if level not in (None, "UNDEFINED"):
            return str(level)
    return "FULL"


def allow_auto_update_schema(policies: Policies, config: BrokerConfig) -> bool:
    if policies.is_allow_auto_update_schema is not None:
        return policies.is_allow_auto_update_schema
    return config.isAllowAutoUpdateSchemaEnabled


def schema_validation_enforced(policies: Policies, config: BrokerConfig) -> bool:
    """Pulsar refuses schema-less producers when the broker or the namespace says so."""
    return config.isSchemaValidationEnforced or bool(policies.schema_validation_enforced)
