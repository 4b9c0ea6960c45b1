"""The HTTP app's routes are walked once at start-up, off the event loop, so that the first
clients' requests do not pay for building every handler."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from magnetar.admin import warm_up
from magnetar.admin.app import create_app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.server.broker_service import BrokerService


@pytest.fixture()
def app(tmp_path: Path) -> Iterator[FastAPI]:
    broker = BrokerService(BrokerConfig(), tmp_path)
    yield create_app(broker)
    broker.metadata.close()


def test_the_walk_matches_no_route_and_leaves_the_app_serving(app: FastAPI) -> None:
    thread = warm_up.start(app)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert asyncio.run(warm_up.walk_routes(app)) == 404

    async def clusters() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as http:
            return await http.get("/admin/v2/clusters")
    response = asyncio.run(clusters())
    assert response.status_code == 200
    assert response.json() == ["standalone"]
