"""The HTTP app: admin REST API v2, lookup and Prometheus metrics, in the broker's event loop.

Every handler is ``async def`` so it runs on the event loop thread, the only thread
that may touch core objects (FastAPI would run plain ``def`` handlers in a thread pool).
Errors are Pulsar's ``{"reason": ...}`` with the status Pulsar uses (errors.py); the
OpenAPI document at ``/openapi.json`` describes them as ``ErrorData``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response, StreamingResponse
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from magnetar import __version__
from magnetar.admin import (
    access,
    broker_views,
    console_feeds,
    console_static,
    errors,
    lookup,
    rate_history,
    routes_brokers,
    routes_clusters,
    routes_compaction,
    routes_console,
    routes_console_streams,
    routes_key_shared,
    routes_load,
    routes_namespaces,
    routes_permissions,
    routes_schemas,
    routes_subscriptions,
    routes_tenants,
    routes_topic_policies,
    routes_topics,
    routes_unsupported,
)
from magnetar.admin.cluster_redirect import ClusterRedirect
from magnetar.admin.common import PLAIN_TEXT, Broker
from magnetar.admin.durable_answers import DurableAnswers
from magnetar.admin.metrics import metrics_text
from magnetar.admin.scrape_socket import CHUNKED, ScrapeSocket
from magnetar.server.http_connections import HttpConnections

if TYPE_CHECKING:
    from magnetar.admin.admin_broker import AdminBroker

ERROR_DATA = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"],
              "title": "ErrorData"}


def create_app(broker: AdminBroker, connections: HttpConnections | None = None) -> FastAPI:
    """``connections``: the HTTP ports' open connections, for ``AuthenticationProviderTls``
    (their client certificates) and ``/metrics`` (their sockets)."""
    app = FastAPI(title="Magnetar admin API", version=__version__,
                  description="Apache Pulsar admin REST API v2, lookup and metrics.",
                  dependencies=[Depends(access.guard)])
    app.state.broker = broker
    errors.install(app)
    if broker.cluster is not None:
        app.add_middleware(ClusterRedirect, owners=broker.cluster)
    app.add_middleware(DurableAnswers, changes=lambda: broker.metadata_changes, durable=broker.metadata_durable)
    app.add_middleware(errors.RequestSizeLimit, max_bytes=broker.config.httpMaxRequestSize)
    if broker.authentication is not None:
        app.add_middleware(access.Authenticate, service=broker.authentication, connections=connections)
    for router in (routes_load.router, routes_brokers.router, routes_clusters.router, routes_tenants.router,
                   routes_namespaces.router, routes_permissions.namespace_router, routes_schemas.router,
                   routes_unsupported.namespace_router,
                   lookup.router):
        app.include_router(router)
    app.include_router(routes_compaction.router)
    history = app.state.rate_history = rate_history.RateHistory(broker)
    with contextlib.suppress(RuntimeError):  # no running loop: an app made for a test, no samples
        history.start(asyncio.get_running_loop())
    app.include_router(rate_history.make_router(history))
    app.include_router(broker_views.make_router(history))
    pages = routes_console.TopicsPages(history)
    feeds = console_feeds.Feeds()
    app.include_router(routes_console.make_router(pages))
    app.include_router(routes_console_streams.make_router(history, pages, feeds))
    app.include_router(console_static.make_router())
    for domain in ("persistent", "non-persistent"):
        app.include_router(routes_topics.make_router(domain))
        app.include_router(routes_topic_policies.make_router(domain))
        app.include_router(routes_subscriptions.make_router(domain))
        app.include_router(routes_key_shared.make_router(domain))
        app.include_router(routes_console.make_topic_router(domain))
        app.include_router(routes_console_streams.make_topic_router(domain, feeds))
        app.include_router(routes_permissions.make_topic_router(domain))
        app.include_router(routes_unsupported.make_topic_router(domain))

    @app.get("/metrics", response_class=Response, tags=["metrics"], summary="Prometheus metrics",
             responses=PLAIN_TEXT)
    async def metrics(broker: Broker, request: Request) -> Response:
        direct = ScrapeSocket.of_request(request.scope, connections)
        return StreamingResponse(metrics_text(broker, direct), media_type=CONTENT_TYPE_LATEST,
                                 headers=CHUNKED if direct is not None else None)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document with Pulsar's error shape in place of its validation error."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    components["ErrorData"] = ERROR_DATA
    error = {"description": "Error: {\"reason\": ...}",
             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorData"}}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses["default"] = error
    app.openapi_schema = schema
    return schema
