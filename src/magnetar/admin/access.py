"""Who may call which admin route: authentication of every request, and one
authorization rule per route.

:class:`Authenticate` (middleware) turns the ``Authorization`` header (or, on the HTTPS
port, a verified client certificate) into an identity
before anything else reads the request: bad credentials are a 401 whatever the route.
:func:`guard` (a dependency of every route) then applies the route's rule from
``RULES``, keyed by method and path template; a route without a rule is refused, and a
unit test fails on one. The rules follow Pulsar: cluster and broker operations need a
super user, tenant and namespace administration a tenant admin, topic operations the
permission Pulsar asks for (lookup and stats: produce or consume; subscriptions and
messages: consume; create, delete, unload, policies: tenant admin).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.errors import ASGIApp, Receive, RestError, Scope, Send
from magnetar.admin.store_access import in_rules
from magnetar.core.errors import InvalidTopicName
from magnetar.core.names import TopicName
from magnetar.core.security import authorization
from magnetar.core.security.authorization import Operation
from magnetar.security.authentication import AuthenticationService
from magnetar.security.identity import AuthenticationFailed, Identity
from magnetar.security.peer_certificates import peer_common_name
from magnetar.server.http_connections import HttpConnections

Kind = Literal["public", "authenticated", "super_user", "tenant", "namespace", "topic"]


@dataclass(frozen=True)
class Rule:
    kind: Kind
    operation: Operation = Operation.ADMIN


PUBLIC = Rule("public")
AUTHENTICATED = Rule("authenticated")
SUPER_USER = Rule("super_user")
TENANT_ADMIN = Rule("tenant")
NS_LOOKUP = Rule("namespace", Operation.LOOKUP)
LOOKUP = Rule("topic", Operation.LOOKUP)
CONSUME = Rule("topic", Operation.CONSUME)
TOPIC_ADMIN = Rule("topic", Operation.ADMIN)

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
SUB = TOPIC + "/subscription/{subName}"
SCHEMAS = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
_NAMESPACE_POLICIES = ("deduplication", "retention", "messageTTL", "delayedDelivery", "maxProducersPerTopic",
                       "maxConsumersPerSubscription", "maxConsumersPerTopic", "maxSubscriptionsPerTopic",
                       "maxTopicsPerNamespace", "publishRate", "dispatchRate",
                       "subscriptionDispatchRate", "maxUnackedMessagesPerConsumer",
                       "maxUnackedMessagesPerSubscription", "autoTopicCreation", "subscriptionTypesEnabled",
                       "inactiveTopicPolicies", "subscriptionExpirationTime", "compactionThreshold")
_TOPIC_POLICIES = ("retention", "messageTTL", "deduplicationEnabled", "maxProducers", "maxConsumers",
                   "maxConsumersPerSubscription", "maxUnackedMessagesOnConsumer", "maxUnackedMessagesOnSubscription",
                   "delayedDelivery", "compactionThreshold", "inactiveTopicPolicies")

#: path template (``{domain}`` for persistent and non-persistent) -> method -> rule
RULES: dict[str, dict[str, Rule]] = {
    "/openapi.json": {"GET": PUBLIC},
    "/docs": {"GET": PUBLIC},
    "/docs/oauth2-redirect": {"GET": PUBLIC},
    "/redoc": {"GET": PUBLIC},
    "/metrics": {"GET": PUBLIC},
    # the console's static files: the page asks for a token and calls the routes below with it
    "/": {"GET": PUBLIC},
    "/console": {"GET": PUBLIC},
    "/console/{path:path}": {"GET": PUBLIC},
    "/admin/v2/broker-stats/load-report": {"GET": SUPER_USER},
    "/admin/v2/broker-stats/rate-history": {"GET": SUPER_USER},
    "/admin/v2/broker-stats/brokers": {"GET": SUPER_USER},
    # each topic the caller may look up, checked by the route itself
    "/admin/v2/topics-page": {"GET": AUTHENTICATED},
    # the console's live pages: the permission of the routes whose answers they carry
    "/admin/v2/console-stream/overview": {"GET": SUPER_USER},
    "/admin/v2/console-stream/topics-page": {"GET": AUTHENTICATED},
    TOPIC + "/console-stream": {"GET": LOOKUP},
    "/admin/v2/brokers/ready": {"GET": PUBLIC},
    "/admin/v2/brokers/health": {"GET": SUPER_USER},
    "/admin/v2/brokers/configuration/runtime": {"GET": SUPER_USER},
    "/admin/v2/brokers/configuration": {"GET": SUPER_USER},
    "/admin/v2/brokers/shutdown": {"POST": SUPER_USER},
    "/admin/v2/brokers/leaderBroker": {"GET": SUPER_USER},
    "/admin/v2/brokers/{cluster}": {"GET": SUPER_USER},
    "/admin/v2/brokers/{cluster}/{broker_id}/ownedNamespaces": {"GET": SUPER_USER},
    "/admin/v2/clusters": {"GET": AUTHENTICATED},
    "/admin/v2/clusters/{cluster}": {"GET": SUPER_USER, "PUT": SUPER_USER, "POST": SUPER_USER,
                                     "DELETE": SUPER_USER},
    "/admin/v2/tenants": {"GET": SUPER_USER},
    "/admin/v2/tenants/{tenant}": {"GET": TENANT_ADMIN, "PUT": SUPER_USER, "POST": SUPER_USER,
                                   "DELETE": SUPER_USER},
    "/admin/v2/namespaces/{tenant}": {"GET": TENANT_ADMIN},
    NS: {"GET": TENANT_ADMIN, "PUT": TENANT_ADMIN, "DELETE": TENANT_ADMIN},
    NS + "/topics": {"GET": NS_LOOKUP},
    **{f"{NS}/{policy}": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN, "DELETE": TENANT_ADMIN}
       for policy in _NAMESPACE_POLICIES},
    NS + "/backlogQuotaMap": {"GET": TENANT_ADMIN},
    NS + "/backlogQuota": {"POST": TENANT_ADMIN, "DELETE": TENANT_ADMIN},
    NS + "/unload": {"PUT": TENANT_ADMIN},
    NS + "/bundles": {"GET": TENANT_ADMIN},
    NS + "/{bundle}/unload": {"PUT": TENANT_ADMIN},
    NS + "/{bundle}/split": {"PUT": SUPER_USER},
    NS + "/clearBacklog": {"POST": TENANT_ADMIN},
    NS + "/clearBacklog/{subscription}": {"POST": TENANT_ADMIN},
    NS + "/permissions": {"GET": TENANT_ADMIN},
    NS + "/permissions/{role}": {"POST": TENANT_ADMIN, "DELETE": TENANT_ADMIN},
    NS + "/permissions/subscription": {"GET": TENANT_ADMIN},
    NS + "/permissions/subscription/{subscription}": {"POST": TENANT_ADMIN},
    NS + "/permissions/{subscription}/{role}": {"DELETE": TENANT_ADMIN},
    NS + "/subscriptionAuthMode": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN},
    NS + "/schemaCompatibilityStrategy": {"GET": TENANT_ADMIN, "PUT": TENANT_ADMIN},
    NS + "/isAllowAutoUpdateSchema": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN},
    NS + "/schemaValidationEnforced": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN},
    NS + "/replication": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN},
    **{f"{NS}/{offload}": {"GET": TENANT_ADMIN, "POST": TENANT_ADMIN, "PUT": TENANT_ADMIN, "DELETE": TENANT_ADMIN}
       for offload in ("offloadThreshold", "offloadPolicies")},
    **{f"{NS}/{offload}": {"POST": TENANT_ADMIN, "PUT": TENANT_ADMIN, "DELETE": TENANT_ADMIN}
       for offload in ("offloadThresholdInSeconds", "offloadDeletionLagMs")},
    TOPIC + "/offload": {"PUT": TOPIC_ADMIN},
    TOPIC + "/offloadPolicies": {"POST": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}": {"GET": LOOKUP},
    "/admin/v2/{domain}/{tenant}/{namespace}": {"GET": NS_LOOKUP},
    "/admin/v2/{domain}/{tenant}/{namespace}/partitioned": {"GET": NS_LOOKUP},
    TOPIC: {"PUT": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    TOPIC + "/partitions": {"GET": LOOKUP, "PUT": TOPIC_ADMIN, "POST": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    TOPIC + "/unload": {"PUT": TOPIC_ADMIN},
    TOPIC + "/terminate": {"POST": TOPIC_ADMIN},
    TOPIC + "/terminate/partitions": {"POST": TOPIC_ADMIN},
    TOPIC + "/compaction": {"PUT": TOPIC_ADMIN, "GET": TOPIC_ADMIN},
    TOPIC + "/stats": {"GET": LOOKUP},
    TOPIC + "/partitioned-stats": {"GET": LOOKUP},
    TOPIC + "/internalStats": {"GET": LOOKUP},
    TOPIC + "/partitioned-internalStats": {"GET": LOOKUP},
    TOPIC + "/lastMessageId": {"GET": CONSUME},
    TOPIC + "/messageid/{timestamp}": {"GET": CONSUME},
    TOPIC + "/examinemessage": {"GET": CONSUME},
    TOPIC + "/ledger/{ledgerId}/entry/{entryId}": {"GET": CONSUME},
    **{f"{TOPIC}/{policy}": {"GET": TOPIC_ADMIN, "POST": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN}
       for policy in _TOPIC_POLICIES},
    TOPIC + "/schemaCompatibilityStrategy": {"GET": TOPIC_ADMIN, "PUT": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    TOPIC + "/backlogQuotaMap": {"GET": TOPIC_ADMIN},
    TOPIC + "/backlogQuota": {"POST": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    TOPIC + "/permissions": {"GET": TOPIC_ADMIN},
    TOPIC + "/permissions/{role}": {"POST": TOPIC_ADMIN, "DELETE": TOPIC_ADMIN},
    TOPIC + "/all_subscription/expireMessages/{expireTimeInSeconds}": {"POST": CONSUME},
    TOPIC + "/subscriptions": {"GET": CONSUME},
    SUB: {"PUT": CONSUME, "DELETE": CONSUME},
    SUB + "/skip_all": {"POST": CONSUME},
    SUB + "/skip/{numMessages}": {"POST": CONSUME},
    SUB + "/expireMessages/{expireTimeInSeconds}": {"POST": CONSUME},
    SUB + "/resetcursor/{timestamp}": {"POST": CONSUME},
    SUB + "/resetcursor": {"POST": CONSUME},
    SUB + "/position/{messagePosition}": {"GET": CONSUME},
    TOPIC + "/stickyKeyHash": {"GET": LOOKUP},
    SUB + "/stickyKeyHash": {"GET": LOOKUP},
    SUB + "/consumer/{consumerName}/pendingMessages": {"GET": CONSUME},
    SUB + "/delayedIndex": {"GET": LOOKUP},
    # Pulsar's SchemasResource: reads need GET_METADATA (produce or consume), changes a tenant admin
    SCHEMAS + "/schema": {"GET": LOOKUP, "POST": TENANT_ADMIN, "DELETE": TENANT_ADMIN},
    SCHEMAS + "/schema/{version}": {"GET": LOOKUP},
    SCHEMAS + "/schemas": {"GET": LOOKUP},
    SCHEMAS + "/compatibility": {"POST": TENANT_ADMIN},
    SCHEMAS + "/version": {"POST": LOOKUP},
}


def template_of(path: str) -> str:
    """A route's path with its topic domain as ``{domain}``, the key of ``RULES``."""
    for domain in ("persistent", "non-persistent"):
        prefix = f"/admin/v2/{domain}/"
        if path.startswith(prefix):
            return "/admin/v2/{domain}/" + path[len(prefix):]
    return path


def rule_for(method: str, path: str) -> Rule | None:
    return RULES.get(template_of(path), {}).get(method)


class Authenticate:
    """ASGI middleware: the request's identity in ``scope["state"]["identity"]`` (None
    without credentials and without ``anonymousUserRole``); a 401 for bad credentials."""

    def __init__(self, app: ASGIApp, service: AuthenticationService,
                 connections: HttpConnections | None = None) -> None:
        self.app = app
        self.service = service
        self.connections = connections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        common_name = request_common_name(self.connections, scope) if self.connections is not None else ""
        identity: Identity | None = None
        try:
            identity = await asyncio.to_thread(self.service.authenticate_http, header, common_name)
        except AuthenticationFailed:
            if header:
                await _unauthorized(send, "Authentication required")
                return
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)


def request_common_name(connections: HttpConnections, scope: Scope) -> str:
    """The CN of the client certificate of the connection that brought an HTTP request."""
    transport = connections.of_request(scope)
    return peer_common_name(transport.get_extra_info("ssl_object")) if transport is not None else ""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _unauthorized(send: Send, reason: str) -> None:
    body = json.dumps({"reason": reason}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})


async def guard(request: Request) -> None:
    """The route's rule, applied to the identity :class:`Authenticate` found."""
    broker: AdminBroker = request.app.state.broker
    if broker.authentication is None:
        return
    route = request.scope.get("route")
    path = getattr(route, "path", "")
    rule = rule_for(request.method, path)
    if rule is None:
        raise RestError(403, "No authorization rule for this operation")
    if path == "/metrics" and broker.config.authenticateMetricsEndpoint:
        rule = SUPER_USER  # Pulsar's authenticateMetricsEndpoint: a super user's, once turned on
    if rule.kind == "public":
        return
    identity: Identity | None = request.scope.get("state", {}).get("identity")
    if identity is None:
        raise RestError(401, "Authentication required")
    if rule.kind == "authenticated" or not broker.config.authorizationEnabled:
        return
    params = dict(request.path_params)
    params.setdefault("domain", _domain(getattr(route, "path", "")))
    await _authorize(broker, rule, identity.role, params)


def _domain(path: str) -> str:
    return "non-persistent" if path.startswith("/admin/v2/non-persistent/") else "persistent"


async def _authorize(broker: AdminBroker, rule: Rule, role: str, params: dict[str, Any]) -> None:
    tenant = str(params.get("tenant", ""))
    namespace = f"{tenant}/{params['namespace']}" if "namespace" in params else tenant
    context = await in_rules(broker, lambda rules: rules.access.access_context(namespace))
    if rule.kind == "super_user":
        if not authorization.is_super_user(role, context):
            raise RestError(401, "This operation requires super-user access")
        return
    if _allowed(rule, role, context, params):
        return
    await _not_found_first(broker, rule, namespace)
    if rule.kind == "tenant":
        raise RestError(403, "Don't have permission to administrate resources on this tenant")
    raise RestError(401, f"Unauthorized to validateTopicOperation for operation "
                         f"[{rule.operation.name}] on {_topic(params) or namespace}")


def _allowed(rule: Rule, role: str, context: authorization.AccessContext, params: dict[str, Any]) -> bool:
    if rule.kind == "tenant":
        return authorization.is_tenant_admin(role, context)
    return authorization.allowed(role, rule.operation, context, _topic(params))


async def _not_found_first(broker: AdminBroker, rule: Rule, namespace: str) -> None:
    """As Pulsar, a 404 before the 403 when what the route acts on does not exist: the
    tenant for tenant-admin routes (a namespace may be about to be created), the tenant or
    namespace for namespace and topic routes."""
    missing = await in_rules(broker, lambda rules: rules.access.missing_part(namespace)) if namespace else None
    if missing == "Tenant" or (missing == "Namespace" and rule.kind in ("namespace", "topic")):
        raise RestError(404, f"{missing} does not exist")


def _topic(params: dict[str, Any]) -> str | None:
    if "topic" not in params:
        return None
    domain = params["domain"]
    try:
        name = TopicName.parse(f"{domain}://{params['tenant']}/{params['namespace']}/{params['topic']}")
    except InvalidTopicName:
        return None
    return str(name.partitioned_topic)
