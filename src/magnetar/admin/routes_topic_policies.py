"""Topic-level policies under ``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/...``
(Pulsar's ``PersistentTopics`` topic-policy endpoints).

Each policy has Pulsar's three endpoints: ``GET`` reads the topic's own value (``null``
when unset; with ``applied=true`` the value that applies: topic, else namespace, else
broker), ``POST`` sets it, ``DELETE`` removes it. They are generated from
``TOPIC_POLICY_ENDPOINTS``; backlog quotas, delayed delivery and message TTL, whose
shapes differ from one field with a JSON body, have their own handlers. A policy set on a
partitioned topic is stored under its name and applies to every partition; loaded topics
follow the change at once. This module does not use postponed annotations because the
generated handlers' body types are local variables.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, StrictBool, StrictInt

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, topic_name
from magnetar.admin.errors import precondition_failed
from magnetar.admin.routes_topics import require_exists
from magnetar.admin.store_access import in_rules, in_store
from magnetar.core import policies as resolve
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.policies import (
    INT32_MAX,
    INT64_MAX,
    BacklogQuota,
    BacklogQuotaType,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    Policies,
    RetentionPolicies,
    SchemaCompatibilityStrategy,
    TopicPolicies,
)

Int32Body = Annotated[StrictInt, Body(ge=-(2**31), le=INT32_MAX)]
Int64Body = Annotated[StrictInt, Body(ge=-(2**63), le=INT64_MAX)]
Resolver = Callable[[TopicPolicies, Policies, BrokerConfig], Any]


@dataclass(frozen=True)
class TopicPolicyEndpoint:
    path: str
    #: the ``TopicPolicies`` field it sets
    field: str
    body: Any
    #: the effective value (``applied=true``)
    applied: Resolver
    summary: str
    #: the 412 reason for a negative number, as Pulsar words it (None: not a number)
    negative: str | None = None
    set_method: Literal["POST", "PUT"] = "POST"


TOPIC_POLICY_ENDPOINTS = (
    TopicPolicyEndpoint("retention", "retentionPolicies", RetentionPolicies, resolve.retention, "retention"),
    TopicPolicyEndpoint("deduplicationEnabled", "deduplicationEnabled", StrictBool, resolve.deduplication_enabled,
                        "deduplication"),
    TopicPolicyEndpoint("maxProducers", "maxProducerPerTopic", Int32Body, resolve.max_producers,
                        "max producers", "maxProducers must be 0 or more"),
    TopicPolicyEndpoint("maxConsumers", "maxConsumerPerTopic", Int32Body, resolve.max_consumers,
                        "max consumers", "maxConsumers must be 0 or more"),
    TopicPolicyEndpoint("maxConsumersPerSubscription", "maxConsumersPerSubscription", Int32Body,
                        resolve.max_consumers_per_subscription, "max consumers per subscription",
                        "Invalid value for maxConsumersPerSubscription"),
    TopicPolicyEndpoint("maxUnackedMessagesOnConsumer", "maxUnackedMessagesOnConsumer", Int32Body,
                        resolve.max_unacked_on_consumer, "max unacked messages per consumer",
                        "maxUnackedNum must be 0 or more"),
    TopicPolicyEndpoint("maxUnackedMessagesOnSubscription", "maxUnackedMessagesOnSubscription", Int32Body,
                        resolve.max_unacked_on_subscription, "max unacked messages per subscription",
                        "maxUnackedNum must be 0 or more"),
    TopicPolicyEndpoint("compactionThreshold", "compactionThreshold", Int64Body, resolve.compaction_threshold,
                        "compaction threshold (bytes)", "compactionThreshold must be 0 or more"),
    TopicPolicyEndpoint("inactiveTopicPolicies", "inactiveTopicPolicies", InactiveTopicPolicies,
                        resolve.inactive_topic_policies, "inactive topic"),
    TopicPolicyEndpoint("schemaCompatibilityStrategy", "schemaCompatibilityStrategy", SchemaCompatibilityStrategy,
                        resolve.schema_compatibility_strategy, "schema compatibility strategy", set_method="PUT"),
)

async def update_topic_policies(broker: AdminBroker, name: TopicName, changes: dict[str, Any]) -> None:
    """Write the named fields (None removes one) and apply the result to loaded topics."""
    key = str(name.partitioned_topic)

    def update(store: BrokerMetadataStore) -> None:
        stored = dict(store.get_topic_policies(key) or {})
        for field, value in changes.items():
            if value is None:
                stored.pop(field, None)
            else:
                stored[field] = value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value
        store.put_topic_policies(key, stored)
        store.get_topic_policies(key)  # read back here: the loaded topics apply it from the store's cache
    await in_store(broker, update)
    broker.policies_changed(name)


def make_router(domain: Literal["persistent", "non-persistent"]) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} topic policies"])
    base = "/{tenant}/{namespace}/{topic}/"
    suffix = "" if domain == "persistent" else "NonPersistent"

    async def existing(broker: AdminBroker, tenant: str, namespace: str, topic: str) -> TopicName:
        name = topic_name(domain, tenant, namespace, topic)
        await require_exists(broker, name)
        return name

    async def levels(broker: AdminBroker, name: TopicName) -> tuple[TopicPolicies, Policies, BrokerConfig]:
        config = broker.config
        return await in_rules(broker, lambda rules: (rules.policies.topic_policies(name),
                                                     rules.policies.policies_of(name), config))

    async def own(broker: AdminBroker, name: TopicName) -> TopicPolicies:
        return await in_rules(broker, lambda rules: rules.policies.topic_policies(name))

    for spec in TOPIC_POLICY_ENDPOINTS:
        _add_endpoints(router, spec, base, suffix, existing, levels, own)

    @router.get(base + "messageTTL", summary="Get the topic's message TTL in seconds (applied=true: effective)",
                operation_id=f"getMessageTTL{suffix}")
    async def get_message_ttl(broker: Broker, tenant: str, namespace: str, topic: str,
                              applied: bool = False) -> int | None:
        name = await existing(broker, tenant, namespace, topic)
        ttl = (await own(broker, name)).messageTTLInSeconds
        return resolve.message_ttl_s(*await levels(broker, name)) if applied and ttl is None else ttl

    @router.post(base + "messageTTL", status_code=204, summary="Set the topic's message TTL in seconds",
                 operation_id=f"setMessageTTL{suffix}")
    async def set_message_ttl(broker: Broker, tenant: str, namespace: str, topic: str,
                              messageTTL: Annotated[int, Query(ge=-(2**31), le=INT32_MAX)]) -> None:
        name = await existing(broker, tenant, namespace, topic)
        if messageTTL < 0:
            raise precondition_failed("Invalid value for message TTL")
        await update_topic_policies(broker, name, {"messageTTLInSeconds": messageTTL})

    @router.delete(base + "messageTTL", status_code=204, summary="Remove the topic's message TTL",
                   operation_id=f"removeMessageTTL{suffix}")
    async def remove_message_ttl(broker: Broker, tenant: str, namespace: str, topic: str) -> None:
        await update_topic_policies(broker, await existing(broker, tenant, namespace, topic),
                                    {"messageTTLInSeconds": None})

    @router.get(base + "delayedDelivery", response_model=DelayedDeliveryPolicies | None,
                response_model_exclude_none=True, operation_id=f"getDelayedDelivery{suffix}",
                summary="Get the topic's delayed delivery policy (applied=true: effective)")
    async def get_delayed_delivery(broker: Broker, tenant: str, namespace: str, topic: str,
                                   applied: bool = False) -> DelayedDeliveryPolicies | None:
        name = await existing(broker, tenant, namespace, topic)
        found = await own(broker, name)
        unset = found.delayedDeliveryEnabled is None and found.delayedDeliveryTickTimeMillis is None
        return None if unset and not applied else resolve.delayed_delivery(*await levels(broker, name))

    @router.post(base + "delayedDelivery", status_code=204, summary="Set the topic's delayed delivery policy",
                 operation_id=f"setDelayedDelivery{suffix}")
    async def set_delayed_delivery(broker: Broker, tenant: str, namespace: str, topic: str,
                                   policy: Annotated[DelayedDeliveryPolicies, Body()]) -> None:
        await update_topic_policies(broker, await existing(broker, tenant, namespace, topic), {
            "delayedDeliveryEnabled": policy.active, "delayedDeliveryTickTimeMillis": policy.tickTime,
            "delayedDeliveryMaxDelayInMillis": policy.maxDeliveryDelayInMillis})

    @router.delete(base + "delayedDelivery", status_code=204, summary="Remove the topic's delayed delivery policy",
                   operation_id=f"removeDelayedDelivery{suffix}")
    async def remove_delayed_delivery(broker: Broker, tenant: str, namespace: str, topic: str) -> None:
        await update_topic_policies(broker, await existing(broker, tenant, namespace, topic), {
            "delayedDeliveryEnabled": None, "delayedDeliveryTickTimeMillis": None,
            "delayedDeliveryMaxDelayInMillis": None})

    @router.get(base + "backlogQuotaMap", summary="Get the topic's backlog quotas by type (applied=true: effective)",
                operation_id=f"getBacklogQuotaMap{suffix}")
    async def get_backlog_quota_map(broker: Broker, tenant: str, namespace: str, topic: str,
                                    applied: bool = False) -> dict[str, Any]:
        name = await existing(broker, tenant, namespace, topic)
        quotas = resolve.backlog_quotas(*await levels(broker, name)) if applied \
            else (await own(broker, name)).backLogQuotaMap or {}
        return {kind: quota.model_dump(exclude_none=True) for kind, quota in quotas.items()}

    @router.post(base + "backlogQuota", status_code=204, summary="Set a backlog quota on the topic",
                 operation_id=f"setBacklogQuota{suffix}")
    async def set_backlog_quota(broker: Broker, tenant: str, namespace: str, topic: str,
                                quota: Annotated[BacklogQuota, Body()],
                                backlogQuotaType: BacklogQuotaType = "destination_storage") -> None:
        name = await existing(broker, tenant, namespace, topic)
        quotas = dict((await own(broker, name)).backLogQuotaMap or {})
        quotas[backlogQuotaType] = quota
        await update_topic_policies(broker, name, {"backLogQuotaMap": _quota_map(quotas)})

    @router.delete(base + "backlogQuota", status_code=204, summary="Remove a backlog quota from the topic",
                   operation_id=f"removeBacklogQuota{suffix}")
    async def remove_backlog_quota(broker: Broker, tenant: str, namespace: str, topic: str,
                                   backlogQuotaType: BacklogQuotaType = "destination_storage") -> None:
        name = await existing(broker, tenant, namespace, topic)
        quotas = dict((await own(broker, name)).backLogQuotaMap or {})
        quotas.pop(backlogQuotaType, None)
        await update_topic_policies(broker, name, {"backLogQuotaMap": _quota_map(quotas) or None})

    return router


def _quota_map(quotas: dict[BacklogQuotaType, BacklogQuota]) -> dict[str, Any]:
    return {kind: quota.model_dump(exclude_none=True) for kind, quota in quotas.items()}


def _add_endpoints(router: APIRouter, spec: TopicPolicyEndpoint, base: str, suffix: str,
                   existing: Callable[[AdminBroker, str, str, str], Awaitable[TopicName]],
                   levels: Callable[[AdminBroker, TopicName], Awaitable[tuple[TopicPolicies, Policies, BrokerConfig]]],
                   own: Callable[[AdminBroker, TopicName], Awaitable[TopicPolicies]]) -> None:
    body_type = spec.body

    async def get_policy(broker: Broker, tenant: str, namespace: str, topic: str, applied: bool = False) -> Any:
        name = await existing(broker, tenant, namespace, topic)
        found = getattr(await own(broker, name), spec.field)
        return spec.applied(*await levels(broker, name)) if applied and found is None else found

    async def set_policy(broker: Broker, tenant: str, namespace: str, topic: str,
                         value: Annotated[body_type, Body()]) -> None:  # type: ignore[valid-type]
        name = await existing(broker, tenant, namespace, topic)
        if spec.negative is not None and value < 0:
            raise precondition_failed(spec.negative)
        await update_topic_policies(broker, name, {spec.field: value})

    async def remove_policy(broker: Broker, tenant: str, namespace: str, topic: str) -> None:
        await update_topic_policies(broker, await existing(broker, tenant, namespace, topic), {spec.field: None})

    path = base + spec.path
    name = spec.path[0].upper() + spec.path[1:] + suffix
    router.add_api_route(path, get_policy, methods=["GET"], operation_id=f"getTopic{name}",
                         summary=f"Get the topic's {spec.summary} policy (applied=true: the effective one)")
    router.add_api_route(path, set_policy, methods=[spec.set_method], status_code=204,
                         operation_id=f"setTopic{name}", summary=f"Set the topic's {spec.summary} policy")
    router.add_api_route(path, remove_policy, methods=["DELETE"], status_code=204,
                         operation_id=f"removeTopic{name}", summary=f"Remove the topic's {spec.summary} policy")
