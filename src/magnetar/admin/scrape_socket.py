"""The scraper's own socket, so the text of a ``/metrics`` scrape need not pass the loop.

The text of a scrape is made by a child process (:mod:`magnetar.admin.metrics_worker`).
Passed back through the event loop to the web server and on to the scraper's socket, each
piece of it held the loop (two copies and a write, 441 MB at 50,000 topics), and that
was what was left of a scrape's effect on other clients' publishes: read and dropped
instead of passed on, publishes were as fast as without a scrape. So the child is given
the scraper's socket and writes the text there itself, as the chunks of the HTTP/1.1
response whose head the web server has sent; the server then writes what follows it.

The web server writes to the socket only when the app sends it something, and the app
sends nothing while the child writes, so the two never interleave; the child starts once
the server's own writes have left for the socket. Only plain HTTP/1.1 responses are made
so: an HTTP/1.0 response has no chunks, and a TLS connection's bytes belong to its
session; those scrapes pass their text through the loop as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from magnetar.server.http_connections import HttpConnections, Transport

#: how long the web server's writes (the response's head) may take to reach the socket
FLUSH_TIMEOUT_S = 5.0
#: the header that makes the web server send the response as chunks, as the child does
CHUNKED = {"transfer-encoding": "chunked"}


class ScrapeSocket:
    def __init__(self, transport: Transport, fd: int) -> None:
        self.transport = transport
        self.fd = fd

    @classmethod
    def of_request(cls, scope: Mapping[str, Any], connections: HttpConnections | None) -> ScrapeSocket | None:
        """The socket of a plain HTTP/1.1 request's connection; None for any other."""
        if connections is None or scope.get("http_version") != "1.1":
            return None
        transport = connections.of_request(scope)
        if transport is None or transport.get_extra_info("ssl_object") is not None:
            return None
        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        return cls(transport, fd) if fd >= 0 else None

    async def flushed(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Whether everything the web server wrote has gone to the socket (within the
        timeout, the connection still open), so the child's writes come after it."""
        deadline = time.monotonic() + timeout_s
        await asyncio.sleep(0)
        while self.transport.get_write_buffer_size() > 0:
            if self.transport.is_closing() or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.001)
        return not self.transport.is_closing()
