"""Namespace policies: Pulsar's ``Policies`` JSON and the bodies of its policy endpoints.

Policies are stored in the metadata store as the JSON Pulsar's ``Policies`` class
serializes to (``deduplicationEnabled``, ``retention_policies``,
``message_ttl_in_seconds``, ``delayed_delivery_policies``, ``autoTopicCreationOverride``,
``subscription_types_enabled``, ...), only the fields that were set; reading them back
fills in Pulsar's defaults. Value types are strict: a string where a number belongs
is refused with 400 rather than guessed at.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

NonNegativeInt = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=INT64_MAX)]
SubscriptionType = Literal["Exclusive", "Shared", "Failover", "Key_Shared"]
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
    max_unacked_messages_per_consumer: NonNegativeInt | None = None
    max_unacked_messages_per_subscription: NonNegativeInt | None = None
    subscription_types_enabled: list[SubscriptionType] | None = None
    properties: dict[str, str] | None = None


def policies_to_store(policies: Policies | None) -> dict[str, Any]:
    if policies is None:
        return {}
    stored = policies.model_dump(exclude_none=True, exclude={"deleted"})
    if "subscription_types_enabled" in stored:
        stored["subscription_types_enabled"] = sorted(set(stored["subscription_types_enabled"]))
    return stored


#: ``Policies`` as Pulsar serializes a fresh namespace (null fields are omitted).
DEFAULT_POLICIES: dict[str, Any] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
    "replication_clusters": [],
    "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
    "backlog_quota_map": {},
    "clusterDispatchRate": {},
    "topicDispatchRate": {},
    "subscriptionDispatchRate": {},
    "replicatorDispatchRate": {},
    "clusterSubscribeRate": {},
    "publishMaxMessageRate": {},
    "latency_stats_sample_rate": {},
    "deleted": False,
    "encryption_required": False,
    "subscription_auth_mode": "None",
    "offload_threshold": -1,
    "schema_auto_update_compatibility_strategy": "Full",
    "schema_compatibility_strategy": "UNDEFINED",
    "schema_validation_enforced": False,
    "subscription_types_enabled": [],
    "properties": {},
}


def full_policies(stored: dict[str, Any], cluster: str) -> dict[str, Any]:
    """Stored policies over Pulsar's defaults, as ``GET /namespaces/{tenant}/{namespace}``."""
    policies = copy.deepcopy(DEFAULT_POLICIES)
    policies["replication_clusters"] = [cluster]
    policies.update(copy.deepcopy(stored))
    return policies
