"""The HTTP app: admin REST API v2, lookup and Prometheus metrics, in the broker's loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response

if TYPE_CHECKING:
    from magnetar.server.broker import BrokerOperations


def create_app(broker: BrokerOperations) -> FastAPI:
    app = FastAPI(title="Magnetar admin API", version="2")

    @app.get("/admin/v2/brokers/health", response_class=PlainTextResponse)
    def health() -> str:
        return "ok"

    @app.get("/metrics")
    def metrics() -> Response:
        from magnetar.admin.metrics import render_metrics
        body, content_type = render_metrics(broker)
        return Response(body, media_type=content_type)

    return app
