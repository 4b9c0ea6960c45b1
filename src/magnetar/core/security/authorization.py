"""Who may do what: Pulsar's ``PulsarAuthorizationProvider`` decisions, sans-IO.

A role is allowed an operation by being a super user (``superUserRoles``), an admin of
the tenant (the tenant's ``adminRoles``), or by a permission granted on the namespace or
the topic (the namespace policies' ``auth_policies``). The shells gather those facts
into an :class:`AccessContext`; the decisions here read nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict

#: Pulsar's ``AuthAction`` values, as the admin API takes and returns them
AuthAction = Literal["produce", "consume", "functions", "sources", "sinks", "packages"]
AUTH_ACTIONS: tuple[AuthAction, ...] = ("produce", "consume", "functions", "sources", "sinks", "packages")


class AuthPolicies(BaseModel):
    """Pulsar's ``AuthPolicies`` JSON: role -> actions on the namespace, and per topic."""

    model_config = ConfigDict(extra="allow")
    namespace_auth: dict[str, list[AuthAction]] = {}
    destination_auth: dict[str, dict[str, list[AuthAction]]] = {}
    subscription_auth_roles: dict[str, list[str]] = {}


class Operation(Enum):
    """What a request does, grouped as Pulsar's provider grants it."""

    #: LOOKUP, GET_STATS, GET_METADATA: anyone who may produce or consume
    LOOKUP = "lookup"
    PRODUCE = "produce"
    #: CONSUME, SUBSCRIBE, UNSUBSCRIBE, SKIP, RESET_CURSOR, PEEK_MESSAGES, ...
    CONSUME = "consume"
    #: everything else (create, delete, unload, policies, permissions): tenant admins only
    ADMIN = "admin"


@dataclass(frozen=True)
class AccessContext:
    """The facts one decision needs about the tenant and namespace involved."""

    super_users: frozenset[str] = frozenset()
    tenant_admins: frozenset[str] = frozenset()
    auth: AuthPolicies = field(default_factory=AuthPolicies)
    #: the namespace's ``subscription_auth_mode``: "None" or "Prefix"
    subscription_auth_mode: str = "None"


def is_super_user(role: str | None, ctx: AccessContext) -> bool:
    return role is not None and role in ctx.super_users


def is_tenant_admin(role: str | None, ctx: AccessContext) -> bool:
    """Super users administer every tenant."""
    return role is not None and (role in ctx.super_users or role in ctx.tenant_admins)


def granted_actions(role: str, ctx: AccessContext, topic: str | None = None) -> set[str]:
    """The actions granted to ``role`` on the namespace, plus on ``topic`` when given."""
    actions: set[str] = set(ctx.auth.namespace_auth.get(role, ()))
    if topic is not None:
        actions |= set(ctx.auth.destination_auth.get(topic, {}).get(role, ()))
    return actions


def allowed(role: str | None, operation: Operation, ctx: AccessContext, topic: str | None = None) -> bool:
    """Whether ``role`` may perform ``operation`` on the namespace, or on ``topic`` (the
    name of a partitioned topic, not of one of its partitions: permissions are granted
    on the whole topic)."""
    if role is None:
        return False
    if is_tenant_admin(role, ctx):
        return True
    actions = granted_actions(role, ctx, topic)
    if operation is Operation.PRODUCE:
        return "produce" in actions
    if operation is Operation.CONSUME:
        return "consume" in actions
    if operation is Operation.LOOKUP:
        return bool(actions & {"produce", "consume"})
    return False


def subscription_refusal(role: str | None, ctx: AccessContext, subscription: str, topic: str) -> str | None:
    """Why ``role`` may not consume from ``subscription`` (Pulsar's messages), or None: a
    subscription with roles granted (``subscription_auth_roles``) admits only them, and
    ``subscription_auth_mode`` Prefix admits only names that start with the role. Super
    users and tenant admins pass."""
    if role is None or is_tenant_admin(role, ctx) or not subscription:
        return None
    roles = ctx.auth.subscription_auth_roles.get(subscription)
    if roles and role not in roles:
        return f"{role} is not authorized to access subscription {subscription} on topic {topic}"
    if ctx.subscription_auth_mode == "Prefix" and not subscription.startswith(role):
        return (f"Failed to create consumer - The subscription name needs to be prefixed by the authentication "
                f"role, like {role}-xxxx for topic: {topic}")
    return None


def grant_subscription(auth: AuthPolicies, subscription: str, roles: list[str]) -> AuthPolicies:
    updated = auth.model_copy(deep=True)
    updated.subscription_auth_roles[subscription] = sorted(set(roles))
    return updated


def revoke_subscription(auth: AuthPolicies, subscription: str, role: str) -> AuthPolicies | None:
    """A copy without ``role`` on ``subscription``; None if the subscription has no grants."""
    if subscription not in auth.subscription_auth_roles:
        return None
    updated = auth.model_copy(deep=True)
    updated.subscription_auth_roles[subscription] = [r for r in updated.subscription_auth_roles[subscription]
                                                     if r != role]
    return updated


def grant(auth: AuthPolicies, role: str, actions: list[AuthAction], topic: str | None = None) -> AuthPolicies:
    """A copy with ``role``'s actions on the namespace (or ``topic``) set to ``actions``."""
    updated = auth.model_copy(deep=True)
    if topic is None:
        updated.namespace_auth[role] = sorted(set(actions))
    else:
        updated.destination_auth.setdefault(topic, {})[role] = sorted(set(actions))
    return updated


def revoke(auth: AuthPolicies, role: str, topic: str | None = None) -> AuthPolicies:
    updated = auth.model_copy(deep=True)
    if topic is None:
        updated.namespace_auth.pop(role, None)
    else:
        roles = updated.destination_auth.get(topic, {})
        roles.pop(role, None)
        if not roles:
            updated.destination_auth.pop(topic, None)
    return updated


def topic_permissions(auth: AuthPolicies, topic: str) -> dict[str, list[AuthAction]]:
    """Pulsar's topic ``GET .../permissions``: the namespace's grants and the topic's, merged."""
    merged: dict[str, set[AuthAction]] = {role: set(actions) for role, actions in auth.namespace_auth.items()}
    for role, actions in auth.destination_auth.get(topic, {}).items():
        merged.setdefault(role, set()).update(actions)
    return {role: sorted(actions) for role, actions in merged.items()}
