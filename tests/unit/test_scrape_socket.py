"""Which scrapes the child may answer on the scraper's socket, and when it may start."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from magnetar.admin.scrape_socket import ScrapeSocket
from magnetar.server.http_connections import HttpConnections

SERVER = ("127.0.0.1", 8080)


class FakeSocket:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


class FakeTransport:
    def __init__(self, port: int, fd: int = 7, tls: bool = False) -> None:
        self.info: dict[str, Any] = {"peername": ("127.0.0.1", port), "sockname": SERVER, "socket": FakeSocket(fd)}
        if tls:
            self.info["ssl_object"] = object()
        self.closing = False
        #: what the server still holds unwritten, after each look
        self.buffered: list[int] = [0]

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.info.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered.pop(0) if len(self.buffered) > 1 else self.buffered[0]


def request(port: int, version: str = "1.1") -> dict[str, Any]:
    return {"client": ("127.0.0.1", port), "server": SERVER, "http_version": version}


def connected(*transports: FakeTransport) -> HttpConnections:
    connections = HttpConnections()
    for transport in transports:
        connections.connection_made(transport)
    return connections


def test_a_plain_http_11_request_gets_its_socket() -> None:
    transport = FakeTransport(1000, fd=42)
    found = ScrapeSocket.of_request(request(1000), connected(transport))
    assert found is not None and found.fd == 42 and found.transport is transport


@pytest.mark.parametrize("case", ["http/1.0", "http/2", "tls", "unknown", "closing", "no socket",
                                  "closed socket", "no table"])
def test_any_other_request_passes_its_text_through_the_loop(case: str) -> None:
    transport = FakeTransport(1000, tls=case == "tls")
    transport.closing = case == "closing"
    if case == "no socket":
        del transport.info["socket"]
    if case == "closed socket":
        transport.info["socket"] = FakeSocket(-1)
    version = {"http/1.0": "1.0", "http/2": "2"}.get(case, "1.1")
    port = 1001 if case == "unknown" else 1000
    connections = None if case == "no table" else connected(transport)
    assert ScrapeSocket.of_request(request(port, version), connections) is None


def test_the_child_starts_once_the_servers_writes_have_left() -> None:
    transport = FakeTransport(1000)
    transport.buffered = [300, 300, 120, 0]
    assert asyncio.run(ScrapeSocket(transport, 7).flushed(timeout_s=5.0))
    assert transport.buffered == [0]


def test_a_buffer_that_does_not_drain_or_a_closing_connection_means_no_child() -> None:
    stuck = FakeTransport(1000)
    stuck.buffered = [10]
    assert not asyncio.run(ScrapeSocket(stuck, 7).flushed(timeout_s=0.01))
    closing = FakeTransport(1001)
    closing.buffered = [10]
    closing.closing = True
    assert not asyncio.run(ScrapeSocket(closing, 7).flushed(timeout_s=5.0))
    gone = FakeTransport(1002)
    gone.closing = True
    assert not asyncio.run(ScrapeSocket(gone, 7).flushed(timeout_s=5.0))
