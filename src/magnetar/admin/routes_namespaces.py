"""``/admin/v2/namespaces``: namespaces and their policies (Pulsar's ``Namespaces`` v2).

Each policy has Pulsar's three endpoints: ``GET`` reads it (``null`` when unset),
``POST`` sets it, ``DELETE`` removes it. They are generated from ``POLICY_ENDPOINTS``;
this module does not use postponed annotations because the generated handlers'
body types are local variables.
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from fastapi.responses import RedirectResponse
from pydantic import StrictBool

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import (
    Broker,
    check_name,
    load_topic,
    namespace_name,
    namespaces_in,
    require_namespace,
    tenant_in,
    topics_listed,
    update_namespace,
)
from magnetar.admin.errors import RestError, conflict, precondition_failed
from magnetar.admin.namespace_ops import delete_namespace_contents, partitioned_in_namespace, topics_in_namespace
from magnetar.admin.policies import full_policies, policies_to_store
from magnetar.admin.routes_topic_policies import Int32Body
from magnetar.admin.routes_unsupported import check_unsupported_policies
from magnetar.admin.store_access import in_rules, in_store
from magnetar.core.cluster.bundles_data import bundles_data, bundles_of
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle, NamespaceBundles
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    NonNegativeInt,
    NonNegativeInt64,
    Policies,
    PublishRate,
    RetentionPolicies,
    SchemaCompatibilityStrategy,
    SubscriptionType,
)

router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])

TopicMode = Literal["PERSISTENT", "NON_PERSISTENT", "ALL"]


@router.get("/{tenant}", summary="List the namespaces of a tenant")
async def list_namespaces(broker: Broker, tenant: str) -> list[str]:
    name = check_name("tenant", tenant)
    return await in_store(broker, lambda store: namespaces_in(store, name))


@router.put("/{tenant}/{namespace}", status_code=204, summary="Create a namespace, optionally with policies")
async def create_namespace(broker: Broker, tenant: str, namespace: str,
                           policies: Annotated[Policies | None, Body()] = None) -> None:
    name = namespace_name(tenant, namespace)
    stored = policies_to_store(policies)
    cluster = broker.config.clusterName

    def create(store: BrokerMetadataStore) -> None:
        tenant_in(store, tenant)
        if store.get_namespace_policies(name) is not None:
            raise conflict("Namespace already exists")
        check_unsupported_policies(store, cluster, stored)
        store.create_namespace(name, stored)
    await in_store(broker, create)


@router.delete("/{tenant}/{namespace}", status_code=204,
               summary="Delete a namespace (refused while it has topics unless forced)")
async def delete_namespace(broker: Broker, tenant: str, namespace: str, force: bool = False) -> None:
    name = namespace_name(tenant, namespace)
    await require_namespace(broker, name)
    has_topics = await topics_in_namespace(broker, name) or await partitioned_in_namespace(broker, name)
    if has_topics and not force:
        raise conflict("Cannot delete non empty namespace")
    await delete_namespace_contents(broker, name)
    await in_store(broker, lambda store: store.delete_namespace(name))


@router.get("/{tenant}/{namespace}", summary="Get a namespace's policies")
async def get_policies(broker: Broker, tenant: str, namespace: str) -> dict[str, Any]:
    name = namespace_name(tenant, namespace)
    return full_policies(await require_namespace(broker, name), broker.config.clusterName,
                         broker.config.isAllowAutoUpdateSchemaEnabled)


@router.get("/{tenant}/{namespace}/topics", summary="List the topics of a namespace")
async def list_namespace_topics(broker: Broker, tenant: str, namespace: str,
                                mode: TopicMode = "PERSISTENT") -> list[str]:
    name = namespace_name(tenant, namespace)
    listed = {"PERSISTENT": 0, "NON_PERSISTENT": 1, "ALL": 2}[mode]
    return await in_rules(broker, lambda rules: topics_listed(rules, name, listed))


@router.put("/{tenant}/{namespace}/unload", status_code=204,
            summary="Unload every topic of the namespace: clients reconnect and they load again")
async def unload_namespace(broker: Broker, request: Request, tenant: str, namespace: str) -> None:
    name = namespace_name(tenant, namespace)
    policies = await require_namespace(broker, name)
    if broker.cluster is None:
        await broker.release.unload_namespace(name)
        return
    # each bundle at its owner: this broker's here, the others' through their admin API (as
    # Pulsar's broker does, with the caller's credentials)
    prefix = request.url.path.removesuffix("/unload")
    for unit in _bundles(name, policies).bundles:
        redirect = await broker.cluster.unload_bundle(unit, f"{prefix}/{unit.range_name}/unload")
        if redirect is not None:
            await _forward_put(redirect.location, request.headers.get("authorization"))


async def _forward_put(url: str, authorization: str | None) -> None:
    import httpx
    headers = {} if authorization is None else {"authorization": authorization}
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.put(url, headers=headers)
    except httpx.HTTPError as exc:
        raise RestError(503, f"cannot reach the owner at {url}: {exc}") from None
    if response.status_code >= 300:
        raise RestError(503, f"the owner answered {response.status_code} to {url}: {response.text[:200]}")


@router.get("/{tenant}/{namespace}/bundles", summary="The namespace's bundles (Pulsar's BundlesData)")
async def namespace_bundles(broker: Broker, tenant: str, namespace: str) -> dict[str, Any]:
    name = namespace_name(tenant, namespace)
    return bundles_data(_bundles(name, await require_namespace(broker, name)))


def _bundles(name: str, policies: dict[str, Any]) -> NamespaceBundles:
    try:
        return bundles_of(name, policies)
    except InvalidBundle as exc:
        raise RestError(500, str(exc)) from None


@router.put("/{tenant}/{namespace}/{bundle}/unload", status_code=204, response_model=None,
            summary="Unload a bundle: its owner closes its topics and gives it up; the next lookup places it")
async def unload_namespace_bundle(broker: Broker, request: Request, tenant: str, namespace: str,
                                  bundle: str, destinationBroker: str | None = None) -> RedirectResponse | None:
    name = namespace_name(tenant, namespace)
    policies = await require_namespace(broker, name)
    try:
        unit = NamespaceBundle.parse(name, bundle)
    except InvalidBundle as exc:
        raise precondition_failed(str(exc)) from None
    if unit not in _bundles(name, policies).bundles:
        raise precondition_failed(f"Bundle {bundle} is not a bundle of {name}")
    if broker.cluster is None:  # a standalone broker keeps the bundle; its topics load again on use
        for topic in [t for t in broker.topics.values() if t.name.namespace_name == name]:
            if unit.includes(str(topic.name)):
                await broker.release.unload_topic(topic.name)
        return None
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    redirect = await broker.cluster.unload_bundle(unit, path, destinationBroker or None)
    return None if redirect is None else RedirectResponse(redirect.location, status_code=redirect.status)


@router.post("/{tenant}/{namespace}/clearBacklog", status_code=204,
             summary="Skip every message of every subscription of every topic of the namespace")
async def clear_namespace_backlog(broker: Broker, tenant: str, namespace: str) -> None:
    await _clear_backlog(broker, namespace_name(tenant, namespace), None)


@router.post("/{tenant}/{namespace}/clearBacklog/{subscription}", status_code=204,
             summary="Skip every message of one subscription on every topic of the namespace")
async def clear_namespace_subscription_backlog(broker: Broker, tenant: str, namespace: str,
                                               subscription: str) -> None:
    await _clear_backlog(broker, namespace_name(tenant, namespace), subscription)


async def _clear_backlog(broker: AdminBroker, namespace: str, subscription: str | None) -> None:
    keys = await in_rules(broker, lambda rules: topics_listed(rules, namespace, 0))
    for key in keys:
        topic = await load_topic(broker, TopicName.parse(key))
        subs = [s for s in topic.subscriptions.values() if subscription is None or s.name == subscription]
        for sub in subs:
            sub.skip_all(broker.now_ms())
        if subs:
            await broker.cursors.store_cursors(topic)


# -- policies -------------------------------------------------------------------------------------
async def _update_policy(broker: AdminBroker, tenant: str, namespace: str, field: str, value: Any) -> None:
    name = namespace_name(tenant, namespace)

    def change(policies: dict[str, Any]) -> dict[str, Any]:
        if value is None:
            policies.pop(field, None)
        else:
            policies[field] = value
        return policies
    await update_namespace(broker, name, change)
    broker.policies_changed(name)


@dataclass(frozen=True)
class PolicyEndpoint:
    path: str
    field: str
    body: Any
    summary: str
    #: the 412 reason for a negative number, as Pulsar words it (None: the body type decides)
    negative: str | None = None


POLICY_ENDPOINTS = (
    PolicyEndpoint("deduplication", "deduplicationEnabled", StrictBool, "producer deduplication"),
    PolicyEndpoint("retention", "retention_policies", RetentionPolicies, "retention"),
    PolicyEndpoint("messageTTL", "message_ttl_in_seconds", Int32Body, "message TTL in seconds",
                   "Invalid value for message TTL"),
    PolicyEndpoint("delayedDelivery", "delayed_delivery_policies", DelayedDeliveryPolicies, "delayed delivery"),
    PolicyEndpoint("maxProducersPerTopic", "max_producers_per_topic", Int32Body, "max producers per topic",
                   "maxProducersPerTopic must be 0 or more"),
    PolicyEndpoint("maxConsumersPerTopic", "max_consumers_per_topic", Int32Body, "max consumers per topic",
                   "maxConsumersPerTopic must be 0 or more"),
    PolicyEndpoint("maxSubscriptionsPerTopic", "max_subscriptions_per_topic", Int32Body,
                   "max subscriptions per topic",
                   "maxSubscriptionsPerTopic must be 0 or more"),
    PolicyEndpoint("maxTopicsPerNamespace", "max_topics_per_namespace", Int32Body, "max topics per namespace",
                   "maxTopicsPerNamespace must be 0 or more"),
    PolicyEndpoint("maxConsumersPerSubscription", "max_consumers_per_subscription", Int32Body,
                   "max consumers per subscription",
                   "maxConsumersPerSubscription must be 0 or more"),
    PolicyEndpoint("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer", Int32Body,
                   "max unacked messages per consumer",
                   "maxUnackedMessagesPerConsumer must be 0 or more"),
    PolicyEndpoint("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription",
                   Int32Body, "max unacked messages per subscription",
                   "maxUnackedMessagesPerSubscription must be 0 or more"),
    PolicyEndpoint("autoTopicCreation", "autoTopicCreationOverride", AutoTopicCreationOverride,
                   "auto topic creation override"),
    PolicyEndpoint("inactiveTopicPolicies", "inactive_topic_policies", InactiveTopicPolicies,
                   "inactive topic"),
    PolicyEndpoint("subscriptionExpirationTime", "subscription_expiration_time_minutes", NonNegativeInt,
                   "subscription expiration time in minutes"),
    PolicyEndpoint("subscriptionTypesEnabled", "subscription_types_enabled", list[SubscriptionType],
                   "subscription types enabled"),
    PolicyEndpoint("compactionThreshold", "compaction_threshold", NonNegativeInt64,
                   "compaction threshold (backlog bytes; 0 turns automatic compaction off)"),
)


def _to_store(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return sorted(set(value))
    return value


def _add_policy_endpoints(spec: PolicyEndpoint) -> None:
    body_type = spec.body

    async def get_policy(broker: Broker, tenant: str, namespace: str) -> Any:
        name = namespace_name(tenant, namespace)
        return (await require_namespace(broker, name)).get(spec.field)

    async def set_policy(broker: Broker, tenant: str, namespace: str,
                         value: Annotated[body_type, Body()]) -> None:  # type: ignore[valid-type]
        if spec.negative is not None and value < 0:
            raise precondition_failed(spec.negative)
        await _update_policy(broker, tenant, namespace, spec.field, _to_store(value))

    async def remove_policy(broker: Broker, tenant: str, namespace: str) -> None:
        await _update_policy(broker, tenant, namespace, spec.field, None)

    path = f"/{{tenant}}/{{namespace}}/{spec.path}"
    suffix = spec.path[0].upper() + spec.path[1:]
    router.add_api_route(path, get_policy, methods=["GET"], summary=f"Get the {spec.summary} policy",
                         response_model=body_type | None, response_model_exclude_none=True,
                         operation_id=f"get{suffix}")
    router.add_api_route(path, set_policy, methods=["POST"], status_code=204,
                         summary=f"Set the {spec.summary} policy", operation_id=f"set{suffix}")
    router.add_api_route(path, remove_policy, methods=["DELETE"], status_code=204,
                         summary=f"Remove the {spec.summary} policy", operation_id=f"remove{suffix}")


for _spec in POLICY_ENDPOINTS:
    _add_policy_endpoints(_spec)


@router.get("/{tenant}/{namespace}/backlogQuotaMap", summary="Get the backlog quotas by type")
async def get_backlog_quota_map(broker: Broker, tenant: str, namespace: str) -> dict[str, Any]:
    quotas: dict[str, Any] = (await require_namespace(broker, namespace_name(tenant, namespace))).get(
        "backlog_quota_map") or {}
    return quotas


@router.post("/{tenant}/{namespace}/backlogQuota", status_code=204, summary="Set a backlog quota")
async def set_backlog_quota(broker: Broker, tenant: str, namespace: str, quota: Annotated[BacklogQuota, Body()],
                            backlogQuotaType: BacklogQuotaType = "destination_storage") -> None:
    name = namespace_name(tenant, namespace)
    quotas = dict((await require_namespace(broker, name)).get("backlog_quota_map") or {})
    quotas[backlogQuotaType] = quota.model_dump(exclude_none=True)
    await _update_policy(broker, tenant, namespace, "backlog_quota_map", quotas)


@router.delete("/{tenant}/{namespace}/backlogQuota", status_code=204, summary="Remove a backlog quota")
async def remove_backlog_quota(broker: Broker, tenant: str, namespace: str,
                               backlogQuotaType: BacklogQuotaType = "destination_storage") -> None:
    name = namespace_name(tenant, namespace)
    quotas = dict((await require_namespace(broker, name)).get("backlog_quota_map") or {})
    quotas.pop(backlogQuotaType, None)
    await _update_policy(broker, tenant, namespace, "backlog_quota_map", quotas or None)



def _add_cluster_rate_endpoints(path: str, field: str, body: type[PublishRate] | type[DispatchRate],
                                summary: str) -> None:
    """A rate kept by cluster, as Pulsar stores it: ``field: {cluster: rate}``."""
    async def rates_of(broker: AdminBroker, tenant: str, namespace: str) -> dict[str, Any]:
        return dict((await require_namespace(broker, namespace_name(tenant, namespace))).get(field) or {})

    async def get_rate(broker: Broker, tenant: str, namespace: str) -> Any:
        return (await rates_of(broker, tenant, namespace)).get(broker.config.clusterName)

    async def set_rate(broker: Broker, tenant: str, namespace: str,
                       rate: Annotated[body, Body()]) -> None:  # type: ignore[valid-type]
        rates = await rates_of(broker, tenant, namespace)
        rates[broker.config.clusterName] = rate.model_dump()  # type: ignore[attr-defined]
        await _update_policy(broker, tenant, namespace, field, rates)

    async def remove_rate(broker: Broker, tenant: str, namespace: str) -> None:
        rates = await rates_of(broker, tenant, namespace)
        rates.pop(broker.config.clusterName, None)
        await _update_policy(broker, tenant, namespace, field, rates)

    route = f"/{{tenant}}/{{namespace}}/{path}"
    suffix = path[0].upper() + path[1:]
    router.add_api_route(route, get_rate, methods=["GET"], response_model=body | None,
                         summary=f"Get the {summary}", operation_id=f"get{suffix}")
    router.add_api_route(route, set_rate, methods=["POST"], status_code=204, summary=f"Set the {summary}",
                         operation_id=f"set{suffix}")
    router.add_api_route(route, remove_rate, methods=["DELETE"], status_code=204,
                         summary=f"Remove the {summary}", operation_id=f"remove{suffix}")


_add_cluster_rate_endpoints("publishRate", "publishMaxMessageRate", PublishRate, "publish rate of each topic")
_add_cluster_rate_endpoints("dispatchRate", "topicDispatchRate", DispatchRate, "dispatch rate of each topic")
_add_cluster_rate_endpoints("subscriptionDispatchRate", "subscriptionDispatchRate", DispatchRate,
                            "dispatch rate of each subscription")


# -- schema policies (Pulsar's paths: PUT for the strategy, POST for the two flags) -------------
@router.get("/{tenant}/{namespace}/schemaCompatibilityStrategy", summary="Get the schema compatibility strategy")
async def get_schema_compatibility_strategy(broker: Broker, tenant: str, namespace: str) -> str:
    stored = await require_namespace(broker, namespace_name(tenant, namespace))
    return str(stored.get("schema_compatibility_strategy") or "UNDEFINED")


@router.put("/{tenant}/{namespace}/schemaCompatibilityStrategy", status_code=204,
            summary="Set the schema compatibility strategy (UNDEFINED: the broker's schemaCompatibilityStrategy)")
async def set_schema_compatibility_strategy(broker: Broker, tenant: str, namespace: str,
                                            strategy: Annotated[SchemaCompatibilityStrategy, Body()]) -> None:
    await _update_policy(broker, tenant, namespace, "schema_compatibility_strategy", strategy)


@router.get("/{tenant}/{namespace}/isAllowAutoUpdateSchema", summary="Whether producers may add schemas")
async def get_is_allow_auto_update_schema(broker: Broker, tenant: str, namespace: str) -> bool:
    stored = await require_namespace(broker, namespace_name(tenant, namespace))
    value = stored.get("is_allow_auto_update_schema")
    return broker.config.isAllowAutoUpdateSchemaEnabled if value is None else bool(value)


@router.post("/{tenant}/{namespace}/isAllowAutoUpdateSchema", status_code=204,
             summary="Allow or forbid producers to add schemas")
async def set_is_allow_auto_update_schema(broker: Broker, tenant: str, namespace: str,
                                          allowed: Annotated[StrictBool, Body()]) -> None:
    await _update_policy(broker, tenant, namespace, "is_allow_auto_update_schema", allowed)


@router.get("/{tenant}/{namespace}/schemaValidationEnforced",
            summary="Whether producers without a schema are refused on topics with one")
async def get_schema_validation_enforced(broker: Broker, tenant: str, namespace: str,
                                         applied: bool = False) -> bool:
    stored = await require_namespace(broker, namespace_name(tenant, namespace))
    enforced = bool(stored.get("schema_validation_enforced"))
    return enforced or (applied and broker.config.isSchemaValidationEnforced)


@router.post("/{tenant}/{namespace}/schemaValidationEnforced", status_code=204,
             summary="Refuse (or accept) producers without a schema on topics with one")
async def set_schema_validation_enforced(broker: Broker, tenant: str, namespace: str,
                                         enforced: Annotated[StrictBool, Body()]) -> None:
    await _update_policy(broker, tenant, namespace, "schema_validation_enforced", enforced)
