"""Building the HTTP app's route handlers before the first client needs them.

FastAPI makes an included router's handlers (their pydantic validators and dependency
plans) on the first request whose path walks past them: with Pulsar's whole admin API
that is about a second of CPU, spread over the first requests, each holding the event
loop for up to a third of a second while publishers wait. One request that matches no
route walks every router and builds them all; it runs on a worker thread at start-up,
touching no handler and no broker state (FastAPI guards the build with a lock)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import MutableMapping
from typing import Any

from fastapi import FastAPI

log = logging.getLogger(__name__)

#: a path no route has
PATH = "/-warm-up"


async def walk_routes(app: FastAPI) -> int:
    """Route one request for a path no route has; the status the router answered."""
    scope = {"type": "http", "method": "GET", "path": PATH, "raw_path": PATH.encode(), "root_path": "",
             "query_string": b"", "headers": [], "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 0), "client": ("127.0.0.1", 0)}
    answered: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(int(message["status"]))
    await app.router(scope, receive, send)
    return answered[0] if answered else 0


def start(app: FastAPI) -> threading.Thread:
    def run() -> None:
        try:
            asyncio.run(walk_routes(app))
        except Exception:  # the first requests then build the handlers themselves
            log.warning("warming up the HTTP routes failed", exc_info=True)
    thread = threading.Thread(target=run, name="http-warm-up", daemon=True)
    thread.start()
    return thread
