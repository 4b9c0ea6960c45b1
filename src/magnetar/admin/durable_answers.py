"""An admin write is answered only once it is durable.

The event loop's metadata connection commits without waiting for the disk (the metadata
writer's fsyncs make its commits durable), so a handler that created a tenant, a topic
or a policy returns before the record is safely on disk. Pulsar answers such a request
once ZooKeeper has the write; here the answer waits for one writer barrier, which syncs
every commit before it. Requests that wrote nothing are answered at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class DurableAnswers:
    """ASGI middleware; ``changes()`` counts the loop connection's writes."""

    def __init__(self, app: ASGIApp, changes: Callable[[], int],
                 durable: Callable[[], concurrent.futures.Future[None]]) -> None:
        """``durable()``: done once every write made so far is durable (the metadata
        writer's barrier)."""
        self.app = app
        self.changes = changes
        self.durable = durable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        before = self.changes()

        async def send_when_durable(message: Message) -> None:
            if message["type"] == "http.response.start" and self.changes() != before:
                await asyncio.wrap_future(self.durable())
            await send(message)

        await self.app(scope, receive, send_when_durable)
