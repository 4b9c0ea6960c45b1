"""The HTTP ports' open connections, found by a request's two addresses."""

from __future__ import annotations

from typing import Any

from magnetar.admin.access import request_common_name
from magnetar.server.http_connections import HttpConnections, remembering

SERVER = ("127.0.0.1", 8080)
OTHER_SERVER = ("127.0.0.1", 8443)


class FakeSsl:
    def __init__(self, common_name: str | None) -> None:
        self.common_name = common_name

    def getpeercert(self) -> dict[str, Any] | None:
        if self.common_name is None:
            return None
        return {"subject": ((("countryName", "NL"),), (("commonName", self.common_name),))}


class FakeTransport:
    def __init__(self, port: int, common_name: str | None = None, server: tuple[str, int] = SERVER) -> None:
        self.info: dict[str, Any] = {"peername": ("127.0.0.1", port), "sockname": server}
        if common_name is not None:
            self.info["ssl_object"] = FakeSsl(common_name)
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.info.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0


def scope(port: int, server: Any = SERVER) -> dict[str, Any]:
    return {"client": ("127.0.0.1", port), "server": server}


def test_a_request_finds_the_connection_of_both_its_addresses_only() -> None:
    connections = HttpConnections()
    plain, tls = FakeTransport(1000), FakeTransport(1000, "alice", OTHER_SERVER)
    connections.connection_made(plain)
    connections.connection_made(tls)
    assert connections.of_request(scope(1000)) is plain
    assert connections.of_request({"client": ["127.0.0.1", 1000], "server": list(OTHER_SERVER)}) is tls
    assert connections.of_request(scope(1001)) is None
    assert connections.of_request(scope(1000, ("127.0.0.2", 8080))) is None
    for bad in ({}, {"client": None, "server": SERVER}, {"client": "garbage", "server": SERVER},
                {"client": ("127.0.0.1", "port"), "server": SERVER}):
        assert connections.of_request(bad) is None


def test_a_connection_that_has_no_addresses_is_not_recorded() -> None:
    connections = HttpConnections()
    transport = FakeTransport(1000)
    transport.info["peername"] = None
    assert connections.connection_made(transport) is None
    assert len(connections) == 0


def test_closing_and_lost_connections_are_not_found_and_lost_ones_are_forgotten() -> None:
    connections = HttpConnections()
    transports = [FakeTransport(2000 + i) for i in range(100)]
    keys = [connections.connection_made(transport) for transport in transports]
    transports[0].closing = True
    assert connections.of_request(scope(2000)) is None
    for key, transport in zip(keys, transports, strict=True):
        connections.connection_lost(key, transport)
    assert len(connections) == 0


def test_a_reused_address_belongs_to_the_new_connection() -> None:
    connections = HttpConnections()
    first = FakeTransport(4000, "alice")
    first_key = connections.connection_made(first)
    second = FakeTransport(4000, "mallory")
    connections.connection_made(second)
    connections.connection_lost(first_key, first)  # the old one's loss is reported late
    assert connections.of_request(scope(4000)) is second


def test_a_request_has_the_common_name_of_its_own_connection() -> None:
    connections = HttpConnections()
    connections.connection_made(FakeTransport(5000, "alice"))
    connections.connection_made(FakeTransport(5001, None))
    connections.connection_made(FakeTransport(5002, "bob", OTHER_SERVER))
    assert request_common_name(connections, scope(5000)) == "alice"
    assert request_common_name(connections, scope(5001)) == ""
    assert request_common_name(connections, scope(5002)) == ""
    assert request_common_name(connections, scope(5002, OTHER_SERVER)) == "bob"


def test_the_protocol_class_records_its_connection_while_it_is_open() -> None:
    class Base:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def connection_made(self, transport: Any) -> None:
            self.calls.append("made")

        def connection_lost(self, exc: Exception | None) -> None:
            self.calls.append("lost")

    connections = HttpConnections()
    protocol = remembering(Base, connections)()
    transport = FakeTransport(6000)
    protocol.connection_made(transport)
    assert connections.of_request(scope(6000)) is transport
    protocol.connection_lost(None)
    assert connections.of_request(scope(6000)) is None
    assert len(connections) == 0
    assert protocol.calls == ["made", "lost"]


def test_a_connection_reset_before_it_is_handed_over_is_not_recorded() -> None:
    class ResetTransport(FakeTransport):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            raise OSError(9, "Bad file descriptor")  # as uvloop raises for a closed socket

    connections = HttpConnections()
    assert connections.connection_made(ResetTransport(7000)) is None
    assert len(connections) == 0
