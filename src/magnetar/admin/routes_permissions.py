"""Permissions: Pulsar's grant, revoke and get on namespaces and topics.

``POST .../permissions/{role}`` takes the list of actions (``produce``, ``consume``,
``functions``, ``sources``, ``sinks``, ``packages``) and replaces what the role had;
``DELETE`` revokes them all. They are kept with the namespace's policies as Pulsar's
``auth_policies`` JSON: ``namespace_auth`` for the namespace, ``destination_auth`` by
topic name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, namespace_name, require_namespace, topic_name, update_namespace
from magnetar.admin.errors import bad_request
from magnetar.core.security import authorization
from magnetar.core.security.authorization import AuthAction, AuthPolicies

Actions = Annotated[list[AuthAction], Body()]
namespace_router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])


async def auth_policies(broker: AdminBroker, namespace: str) -> AuthPolicies:
    stored = (await require_namespace(broker, namespace)).get("auth_policies")
    return AuthPolicies.model_validate(stored or {})


async def store(broker: AdminBroker, namespace: str, auth: AuthPolicies) -> None:
    await update_namespace(broker, namespace, lambda policies: {**policies, "auth_policies": auth.model_dump()})


def _check_role(role: str) -> str:
    if not role.strip():
        raise bad_request("The role must not be blank")
    return role


@namespace_router.get("/{tenant}/{namespace}/permissions", summary="Roles and their actions on a namespace")
async def get_namespace_permissions(broker: Broker, tenant: str, namespace: str) -> dict[str, list[AuthAction]]:
    return (await auth_policies(broker, namespace_name(tenant, namespace))).namespace_auth


@namespace_router.post("/{tenant}/{namespace}/permissions/{role}", status_code=204,
                       summary="Grant a role actions on a namespace")
async def grant_namespace_permission(broker: Broker, tenant: str, namespace: str, role: str,
                                     actions: Actions) -> None:
    name = namespace_name(tenant, namespace)
    await store(broker, name, authorization.grant(await auth_policies(broker, name), _check_role(role), actions))


@namespace_router.delete("/{tenant}/{namespace}/permissions/{role}", status_code=204,
                         summary="Revoke a role's actions on a namespace")
async def revoke_namespace_permission(broker: Broker, tenant: str, namespace: str, role: str) -> None:
    name = namespace_name(tenant, namespace)
    await store(broker, name, authorization.revoke(await auth_policies(broker, name), role))


@namespace_router.get("/{tenant}/{namespace}/permissions/subscription",
                      summary="Roles allowed on each subscription of the namespace")
async def get_subscription_permissions(broker: Broker, tenant: str, namespace: str) -> dict[str, list[str]]:
    return (await auth_policies(broker, namespace_name(tenant, namespace))).subscription_auth_roles


@namespace_router.post("/{tenant}/{namespace}/permissions/subscription/{subscription}", status_code=204,
                       summary="Allow only these roles on a subscription")
async def grant_subscription_permission(broker: Broker, tenant: str, namespace: str, subscription: str,
                                        roles: Annotated[list[str], Body()]) -> None:
    name = namespace_name(tenant, namespace)
    await store(broker, name, authorization.grant_subscription(
        await auth_policies(broker, name), subscription, [_check_role(r) for r in roles]))


@namespace_router.delete("/{tenant}/{namespace}/permissions/{subscription}/{role}", status_code=204,
                         summary="Revoke a role's access to a subscription")
async def revoke_subscription_permission(broker: Broker, tenant: str, namespace: str, subscription: str,
                                         role: str) -> None:
    name = namespace_name(tenant, namespace)
    updated = authorization.revoke_subscription(await auth_policies(broker, name), subscription, role)
    if updated is None:
        raise bad_request("couldn't find subscription")
    await store(broker, name, updated)


@namespace_router.get("/{tenant}/{namespace}/subscriptionAuthMode", summary="Get the subscription auth mode")
async def get_subscription_auth_mode(broker: Broker, tenant: str, namespace: str) -> str:
    policies = await require_namespace(broker, namespace_name(tenant, namespace))
    return str(policies.get("subscription_auth_mode") or "None")


@namespace_router.post("/{tenant}/{namespace}/subscriptionAuthMode", status_code=204,
                       summary="Set the subscription auth mode (None or Prefix)")
async def set_subscription_auth_mode(broker: Broker, tenant: str, namespace: str,
                                     mode: Annotated[Literal["None", "Prefix"], Body()]) -> None:
    await update_namespace(broker, namespace_name(tenant, namespace),
                           lambda policies: {**policies, "subscription_auth_mode": mode})


def make_topic_router(domain: str) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} topics"])
    path = "/{tenant}/{namespace}/{topic}/permissions"

    @router.get(path, summary="Roles and their actions on a topic (the namespace's grants included)")
    async def get_topic_permissions(broker: Broker, tenant: str, namespace: str,
                                    topic: str) -> dict[str, list[AuthAction]]:
        name = topic_name(domain, tenant, namespace, topic)
        return authorization.topic_permissions(await auth_policies(broker, name.namespace_name), str(name))

    @router.post(path + "/{role}", status_code=204, summary="Grant a role actions on a topic")
    async def grant_topic_permission(broker: Broker, tenant: str, namespace: str, topic: str, role: str,
                                     actions: Actions) -> None:
        name = topic_name(domain, tenant, namespace, topic)
        auth = await auth_policies(broker, name.namespace_name)
        await store(broker, name.namespace_name, authorization.grant(auth, _check_role(role), actions, str(name)))

    @router.delete(path + "/{role}", status_code=204, summary="Revoke a role's actions on a topic")
    async def revoke_topic_permission(broker: Broker, tenant: str, namespace: str, topic: str, role: str) -> None:
        name = topic_name(domain, tenant, namespace, topic)
        auth = await auth_policies(broker, name.namespace_name)
        await store(broker, name.namespace_name, authorization.revoke(auth, role, str(name)))

    return router
