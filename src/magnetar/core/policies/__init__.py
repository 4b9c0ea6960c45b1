"""Namespace and topic policies, typed models, and how the broker resolves what applies.

The models are Pulsar's ``Policies`` JSON (``deduplicationEnabled``, ``retention_policies``,
``delayed_delivery_policies``, ``autoTopicCreationOverride``, ...) and Pulsar's
``TopicPolicies`` (``retentionPolicies``, ``messageTTLInSeconds``, ``maxProducerPerTopic``,
...): the admin API validates request bodies with them, the metadata store keeps what was
set, and the broker reads stored policies back through them, so no code guesses at the
shape of a dict. Resolution follows Pulsar 4.x: a topic's own policy, else its
namespace's, else the broker's config; every resolver takes those three in that order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.security.authorization import AuthPolicies

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

M = TypeVar("M", bound=BaseModel)
NonNegativeInt = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=INT64_MAX)]
NonNegativeInt64 = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
SubscriptionType = Literal["Exclusive", "Shared", "Failover", "Key_Shared"]
BacklogQuotaType = Literal["destination_storage", "message_age"]
BacklogQuotaPolicy = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
InactiveTopicDeleteMode = Literal["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]
SchemaCompatibilityStrategy = Literal["UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD",
                                      "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
                                      "FULL_TRANSITIVE"]
AutoUpdateStrategyName = Literal["AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible",
                                 "BackwardTransitive", "ForwardTransitive", "FullTransitive"]
#: the deprecated ``schema_auto_update_compatibility_strategy`` values and what each stands for
AUTO_UPDATE_STRATEGIES: dict[AutoUpdateStrategyName, SchemaCompatibilityStrategy] = {
    "AutoUpdateDisabled": "ALWAYS_INCOMPATIBLE", "Backward": "BACKWARD", "Forward": "FORWARD", "Full": "FULL",
    "AlwaysCompatible": "ALWAYS_COMPATIBLE", "BackwardTransitive": "BACKWARD_TRANSITIVE",
    "ForwardTransitive": "FORWARD_TRANSITIVE", "FullTransitive": "FULL_TRANSITIVE"}


class RetentionPolicies(BaseModel):
    """How long (minutes) and how much (MB) acknowledged data is kept; -1 is unlimited.

    As Pulsar's admin checks it: a single limit of 0 next to a non-zero one is refused
    (-1 ignores a limit; both 0 turns retention off)."""

    model_config = ConfigDict(extra="forbid")
    retentionTimeInMinutes: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] = 0
    retentionSizeInMB: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] = 0

    @model_validator(mode="after")
    def _both_zero_or_neither(self) -> RetentionPolicies:
        if (self.retentionTimeInMinutes == 0) != (self.retentionSizeInMB == 0):
            raise ValueError("Invalid retention policy: Setting a single time or size limit to 0 is invalid when "
                             "one of the limits has a non-zero value. Use the value of -1 instead of 0 to ignore "
                             "a specific limit. To disable retention both limits must be set to 0.")
        return self


class BacklogQuota(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] | None = None
    limitSize: Annotated[StrictInt, Field(ge=-1, le=INT64_MAX)] | None = None
    limitTime: Annotated[StrictInt, Field(ge=-1, le=INT32_MAX)] | None = None
    policy: BacklogQuotaPolicy | None = None


class FrozenBacklogQuota(BacklogQuota):
    """A broker default quota, shared by every topic that sets none of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class InactiveTopicPolicies(BaseModel):
    """Pulsar's ``InactiveTopicPolicies``: when an unused topic is deleted."""

    model_config = ConfigDict(extra="forbid")
    inactiveTopicDeleteMode: InactiveTopicDeleteMode = "delete_when_no_subscriptions"
    maxInactiveDurationSeconds: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = 60
    deleteWhileInactive: StrictBool = False


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
    subscription_expiration_time_minutes: NonNegativeInt | None = None
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
    inactive_topic_policies: InactiveTopicPolicies | None = None
    compaction_threshold: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = None
    schema_compatibility_strategy: SchemaCompatibilityStrategy | None = None
    schema_auto_update_compatibility_strategy: AutoUpdateStrategyName | None = None
    is_allow_auto_update_schema: StrictBool | None = None
    schema_validation_enforced: StrictBool | None = None


class TopicPolicies(BaseModel):
    """One topic's own policies, Pulsar's ``TopicPolicies`` (None: not set on the topic).

    A partitioned topic's policies are kept under its own name and apply to every
    partition, as in Pulsar. Fields Magnetar does not use are kept as given."""

    model_config = ConfigDict(extra="allow")
    backLogQuotaMap: dict[BacklogQuotaType, BacklogQuota] | None = None
    retentionPolicies: RetentionPolicies | None = None
    deduplicationEnabled: StrictBool | None = None
    messageTTLInSeconds: NonNegativeInt | None = None
    maxProducerPerTopic: NonNegativeInt | None = None
    maxConsumerPerTopic: NonNegativeInt | None = None
    maxConsumersPerSubscription: NonNegativeInt | None = None
    maxUnackedMessagesOnConsumer: NonNegativeInt | None = None
    maxUnackedMessagesOnSubscription: NonNegativeInt | None = None
    delayedDeliveryTickTimeMillis: Annotated[StrictInt, Field(ge=1, le=INT64_MAX)] | None = None
    delayedDeliveryEnabled: StrictBool | None = None
    delayedDeliveryMaxDelayInMillis: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = None
    inactiveTopicPolicies: InactiveTopicPolicies | None = None
    compactionThreshold: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] | None = None
    schemaCompatibilityStrategy: SchemaCompatibilityStrategy | None = None


def read_stored(stored: dict[str, Any]) -> Policies:
    """The model of policies read back from the store; a field the model refuses (written by
    an older version) is dropped rather than taking the namespace down."""
    return _tolerant(Policies, stored)


def read_stored_topic(stored: dict[str, Any] | None) -> TopicPolicies:
    """A topic's stored policies (none stored: all unset), read as :func:`read_stored` reads."""
    return _tolerant(TopicPolicies, stored or {})


def _tolerant(model: type[M], stored: dict[str, Any]) -> M:
    try:
        return model.model_validate(stored)
    except ValidationError as exc:
        bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        return model.model_validate({k: v for k, v in stored.items() if k not in bad})


def auto_topic_creation(policies: Policies, config: BrokerConfig) -> tuple[bool, str, int]:
    """Whether topics are created on first use, of which type, with how many partitions."""
    override = policies.autoTopicCreationOverride
    if override is None:
        return config.allowAutoTopicCreation, config.allowAutoTopicCreationType, config.defaultNumPartitions
    if not override.allowAutoTopicCreation or override.topicType is None:
        return override.allowAutoTopicCreation, config.allowAutoTopicCreationType, config.defaultNumPartitions
    return True, override.topicType, override.defaultNumPartitions or config.defaultNumPartitions


def delayed_delivery_active(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> bool:
    if topic.delayedDeliveryEnabled is not None:
        return topic.delayedDeliveryEnabled
    policy = policies.delayed_delivery_policies
    return config.delayedDeliveryEnabled if policy is None else policy.active


def delayed_delivery_tick_ms(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    """The tick of a topic's delayed-delivery trackers: the topic's
    ``delayedDeliveryTickTimeMillis``, else the namespace policy's ``tickTime``, else
    the broker's ``delayedDeliveryTickTimeMillis``."""
    if topic.delayedDeliveryTickTimeMillis is not None:
        return topic.delayedDeliveryTickTimeMillis
    policy = policies.delayed_delivery_policies
    return config.delayedDeliveryTickTimeMillis if policy is None else policy.tickTime


def max_delivery_delay_ms(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    """The longest delivery delay a message may ask for (0: no limit)."""
    if topic.delayedDeliveryMaxDelayInMillis is not None:
        return topic.delayedDeliveryMaxDelayInMillis
    policy = policies.delayed_delivery_policies
    if policy is not None and policy.maxDeliveryDelayInMillis:
        return policy.maxDeliveryDelayInMillis
    return config.delayedDeliveryMaxDelayInMillis


def delayed_delivery(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> DelayedDeliveryPolicies:
    """The delayed-delivery policy that applies, as the admin API shows it (``applied=true``)."""
    return DelayedDeliveryPolicies(tickTime=delayed_delivery_tick_ms(topic, policies, config),
                                   active=delayed_delivery_active(topic, policies, config),
                                   maxDeliveryDelayInMillis=max_delivery_delay_ms(topic, policies, config))


def deduplication_enabled(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> bool:
    if topic.deduplicationEnabled is not None:
        return topic.deduplicationEnabled
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


def retention(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> RetentionPolicies:
    """How much consumed data a topic keeps: ``retentionPolicies``, else the namespace's
    ``retention_policies``, else ``defaultRetentionTimeInMinutes`` / ``defaultRetentionSizeInMB``."""
    if topic.retentionPolicies is not None:
        return topic.retentionPolicies
    if policies.retention_policies is not None:
        return policies.retention_policies
    return RetentionPolicies.model_construct(retentionTimeInMinutes=config.defaultRetentionTimeInMinutes,
                                             retentionSizeInMB=config.defaultRetentionSizeInMB)


def message_ttl_s(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    """Seconds after publication a message is expired on every subscription (0: never)."""
    for value in (topic.messageTTLInSeconds, policies.message_ttl_in_seconds):
        if value is not None:
            return value
    return config.ttlDurationDefaultInSeconds


def backlog_quotas(topic: TopicPolicies, policies: Policies,
                   config: BrokerConfig) -> dict[BacklogQuotaType, BacklogQuota]:
    """The backlog quota of each type: the topic's, else the namespace's, else the broker's
    ``backlogQuotaDefaultLimitBytes`` / ``backlogQuotaDefaultLimitSecond`` with
    ``backlogQuotaDefaultRetentionPolicy``."""
    defaults = _default_backlog_quotas(config.backlogQuotaDefaultLimitBytes, config.backlogQuotaDefaultLimitSecond,
                                       config.backlogQuotaDefaultRetentionPolicy)
    own, namespace = topic.backLogQuotaMap or {}, policies.backlog_quota_map or {}
    return {kind: own.get(kind) or namespace.get(kind) or default for kind, default in defaults}


@functools.lru_cache(maxsize=16)
def _default_backlog_quotas(limit_bytes: int, limit_s: int,
                            policy: str) -> tuple[tuple[BacklogQuotaType, BacklogQuota], ...]:
    """Built once per set of broker defaults, not per call: validating the two models cost
    more than the rest of a topic's quota check, which the periodic sweep and every metrics
    scrape run for each loaded topic. Frozen models, since every topic shares them."""
    chosen: BacklogQuotaPolicy = policy  # type: ignore[assignment]
    return (("destination_storage", FrozenBacklogQuota(limitSize=limit_bytes, limitTime=-1, policy=chosen)),
            ("message_age", FrozenBacklogQuota(limitSize=-1, limitTime=limit_s, policy=chosen)))


def max_producers(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    return _first(topic.maxProducerPerTopic, policies.max_producers_per_topic, config.maxProducersPerTopic)


def max_consumers(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    return _first(topic.maxConsumerPerTopic, policies.max_consumers_per_topic, config.maxConsumersPerTopic)


def max_consumers_per_subscription(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    return _first(topic.maxConsumersPerSubscription, policies.max_consumers_per_subscription,
                  config.maxConsumersPerSubscription)


def max_unacked_on_consumer(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    return _first(topic.maxUnackedMessagesOnConsumer, policies.max_unacked_messages_per_consumer,
                  config.maxUnackedMessagesPerConsumer)


def max_unacked_on_subscription(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    return _first(topic.maxUnackedMessagesOnSubscription, policies.max_unacked_messages_per_subscription,
                  config.maxUnackedMessagesPerSubscription)


def compaction_threshold(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> int:
    """Backlog bytes past which compaction runs by itself (0: never)."""
    return _first(topic.compactionThreshold, policies.compaction_threshold,
                  config.brokerServiceCompactionThresholdInBytes)


def inactive_topic_policies(topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> InactiveTopicPolicies:
    if topic.inactiveTopicPolicies is not None:
        return topic.inactiveTopicPolicies
    if policies.inactive_topic_policies is not None:
        return policies.inactive_topic_policies
    mode: InactiveTopicDeleteMode = config.brokerDeleteInactiveTopicsMode  # type: ignore[assignment]
    duration_s = config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
    return InactiveTopicPolicies(
        inactiveTopicDeleteMode=mode, deleteWhileInactive=config.brokerDeleteInactiveTopicsEnabled,
        maxInactiveDurationSeconds=config.brokerDeleteInactiveTopicsFrequencySeconds if duration_s is None
        else duration_s)


def schema_compatibility_strategy(topic: TopicPolicies, policies: Policies,
                                  config: BrokerConfig) -> SchemaCompatibilityStrategy:
    """``UNDEFINED`` at a level means "ask the next one", as in Pulsar: the topic's
    ``schemaCompatibilityStrategy``, the namespace's ``schema_compatibility_strategy``
    (else its deprecated ``schema_auto_update_compatibility_strategy``), the broker's."""
    namespace = policies.schema_compatibility_strategy
    if namespace in (None, "UNDEFINED") and policies.schema_auto_update_compatibility_strategy is not None:
        namespace = AUTO_UPDATE_STRATEGIES[policies.schema_auto_update_compatibility_strategy]
    for value in (topic.schemaCompatibilityStrategy, namespace):
        if value is not None and value != "UNDEFINED":
            return value
    strategy: SchemaCompatibilityStrategy = config.schemaCompatibilityStrategy  # type: ignore[assignment]
    return strategy


def _first(topic_value: int | None, namespace_value: int | None, broker_value: int) -> int:
    if topic_value is not None:
        return topic_value
    return broker_value if namespace_value is None else namespace_value


@dataclass(frozen=True)
class AppliedPolicies:
    """What a loaded topic's policies resolve to, kept on the topic so that its periodic
    checks (retention, expiry) and new subscriptions read values, not three levels."""

    retention: RetentionPolicies
    message_ttl_s: int
    max_unacked_on_consumer: int
    max_unacked_on_subscription: int
    #: backlog bytes past which compaction runs by itself (0: never)
    compaction_threshold_bytes: int = 0
    #: the longest delivery delay a message may ask for (0: no limit)
    max_delivery_delay_ms: int = 0

    @classmethod
    def resolve(cls, topic: TopicPolicies, policies: Policies, config: BrokerConfig) -> AppliedPolicies:
        return cls(retention(topic, policies, config), message_ttl_s(topic, policies, config),
                   max_unacked_on_consumer(topic, policies, config),
                   max_unacked_on_subscription(topic, policies, config),
                   compaction_threshold(topic, policies, config), max_delivery_delay_ms(topic, policies, config))

    @classmethod
    def of_config(cls, config: BrokerConfig) -> AppliedPolicies:
        return cls.resolve(TopicPolicies(), Policies(), config)


def allow_auto_update_schema(policies: Policies, config: BrokerConfig) -> bool:
    if policies.is_allow_auto_update_schema is not None:
        return policies.is_allow_auto_update_schema
    return config.isAllowAutoUpdateSchemaEnabled


def schema_validation_enforced(policies: Policies, config: BrokerConfig) -> bool:
    """Pulsar refuses schema-less producers when the broker or the namespace says so."""
    return config.isSchemaValidationEnforced or bool(policies.schema_validation_enforced)
