"""Authorization decisions (core, sans-IO) and the admin API's rule table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from magnetar.admin import access
from magnetar.admin.app import create_app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.security import authorization
from magnetar.core.security.authorization import AccessContext, AuthPolicies, Operation
from magnetar.server.broker_service import BrokerService

TOPIC = "persistent://acme/app/orders"
OTHER = "persistent://acme/app/other"


def context(**auth: object) -> AccessContext:
    return AccessContext(frozenset({"root"}), frozenset({"acme-admin"}), AuthPolicies.model_validate(auth))


@pytest.mark.parametrize("operation", list(Operation))
def test_super_users_and_tenant_admins_may_do_anything(operation: Operation) -> None:
    ctx = context()
    assert authorization.allowed("root", operation, ctx, TOPIC)
    assert authorization.allowed("acme-admin", operation, ctx, TOPIC)
    assert not authorization.allowed("stranger", operation, ctx, TOPIC)
    assert not authorization.allowed(None, operation, ctx, TOPIC)


def test_namespace_grants_cover_every_topic() -> None:
    ctx = context(namespace_auth={"writer": ["produce"], "reader": ["consume"]})
    assert authorization.allowed("writer", Operation.PRODUCE, ctx, TOPIC)
    assert not authorization.allowed("writer", Operation.CONSUME, ctx, TOPIC)
    assert authorization.allowed("reader", Operation.CONSUME, ctx, OTHER)
    assert not authorization.allowed("reader", Operation.PRODUCE, ctx, OTHER)
    for role in ("writer", "reader"):
        assert authorization.allowed(role, Operation.LOOKUP, ctx, TOPIC)
        assert not authorization.allowed(role, Operation.ADMIN, ctx, TOPIC)


def test_topic_grants_cover_that_topic_only() -> None:
    ctx = context(destination_auth={TOPIC: {"app": ["produce", "consume"]}})
    assert authorization.allowed("app", Operation.PRODUCE, ctx, TOPIC)
    assert authorization.allowed("app", Operation.CONSUME, ctx, TOPIC)
    assert not authorization.allowed("app", Operation.LOOKUP, ctx, OTHER)
    assert not authorization.allowed("app", Operation.LOOKUP, ctx)  # not the namespace


def test_other_actions_do_not_grant_messaging() -> None:
    ctx = context(namespace_auth={"fn": ["functions", "sources", "sinks", "packages"]})
    for operation in Operation:
        assert not authorization.allowed("fn", operation, ctx, TOPIC)


def test_grant_revoke_and_merged_topic_permissions() -> None:
    auth = authorization.grant(AuthPolicies(), "a", ["consume", "produce", "consume"])
    auth = authorization.grant(auth, "b", ["consume"], TOPIC)
    auth = authorization.grant(auth, "a", ["functions"], TOPIC)
    assert auth.namespace_auth == {"a": ["consume", "produce"]}
    assert authorization.topic_permissions(auth, TOPIC) == {"a": ["consume", "functions", "produce"], "b": ["consume"]}
    assert authorization.topic_permissions(auth, OTHER) == {"a": ["consume", "produce"]}
    auth = authorization.revoke(authorization.revoke(auth, "b", TOPIC), "a")
    assert auth.namespace_auth == {} and auth.destination_auth == {TOPIC: {"a": ["functions"]}}
    assert authorization.revoke(auth, "a", TOPIC).destination_auth == {}


def test_stored_policies_keep_pulsars_shape() -> None:
    stored = {"namespace_auth": {"r": ["produce"]}, "destination_auth": {}, "subscription_auth_roles": {},
              "future_field": 1}
    assert AuthPolicies.model_validate(stored).model_dump() == stored
    with pytest.raises(ValueError):
        AuthPolicies.model_validate({"namespace_auth": {"r": ["fly"]}})


# -- the admin API's rules ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    broker = BrokerService(BrokerConfig(), Path(tmp_path_factory.mktemp("rules")))
    yield create_app(broker)
    broker.metadata.close()


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, routers included."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before included-router contexts: the table is flat
        flat = [(getattr(r, "path", None), getattr(r, "methods", None)) for r in app.routes]
    else:
        flat = [(ctx.path, getattr(ctx.original_route, "methods", None)) for ctx in iter_route_contexts(app.routes)]
    found = {(method, path) for path, methods in flat if path for method in (methods or ()) if method != "HEAD"}
    assert len(found) > 100
    return found


def test_every_route_has_an_authorization_rule(app: FastAPI) -> None:
    missing = sorted(f"{method} {path}" for method, path in routes(app) if access.rule_for(method, path) is None)
    assert missing == []


def test_every_rule_names_a_route(app: FastAPI) -> None:
    served = {(method, access.template_of(path)) for method, path in routes(app)}
    stale = sorted(f"{m} {p}" for p, methods in access.RULES.items() for m in methods if (m, p) not in served)
    assert stale == []


def test_sensitive_routes_are_not_public() -> None:
    public = {p for p, methods in access.RULES.items() if access.PUBLIC in methods.values()}
    assert public == {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/metrics",
                      "/admin/v2/brokers/ready", "/", "/console", "/console/{path:path}"}
    assert access.rule_for("PUT", "/admin/v2/tenants/{tenant}") == access.SUPER_USER
    assert access.rule_for("POST", "/admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}") == \
        access.TENANT_ADMIN
    assert access.rule_for("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/stats") == access.LOOKUP
