"""The HTTPS port's table of client-certificate names, by connection address."""

from __future__ import annotations

from typing import Any

from magnetar.security.peer_certificates import PeerCertificates


class FakeSsl:
    def __init__(self, common_name: str | None) -> None:
        self.common_name = common_name

    def getpeercert(self) -> dict[str, Any] | None:
        if self.common_name is None:
            return None
        return {"subject": ((("countryName", "NL"),), (("commonName", self.common_name),))}


class FakeTransport:
    def __init__(self, port: int, common_name: str | None) -> None:
        self.info = {"peername": ("127.0.0.1", port), "ssl_object": FakeSsl(common_name)}
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.info.get(name, default)

    def is_closing(self) -> bool:
        return self.closing


def test_a_request_finds_the_name_of_its_connection_only() -> None:
    peers = PeerCertificates()
    peers.connection_made(FakeTransport(1000, "alice"))
    peers.connection_made(FakeTransport(1001, None))
    assert peers.common_name(("127.0.0.1", 1000)) == "alice"
    assert peers.common_name(["127.0.0.1", 1000]) == "alice"
    assert peers.common_name(("127.0.0.1", 1001)) == ""
    assert peers.common_name(("127.0.0.2", 1000)) == ""
    assert peers.common_name(None) == ""
    assert peers.common_name("garbage") == ""


def test_closed_connections_prove_nothing_and_are_forgotten() -> None:
    peers = PeerCertificates()
    transports = [FakeTransport(2000 + i, f"role-{i}") for i in range(100)]
    for transport in transports:
        peers.connection_made(transport)
        transport.closing = True
    assert peers.common_name(("127.0.0.1", 2099)) == ""
    peers.connection_made(FakeTransport(3000, "bob"))
    assert len(peers) == 1
    assert peers.common_name(("127.0.0.1", 3000)) == "bob"


def test_a_reused_address_gets_the_new_connection_name() -> None:
    peers = PeerCertificates()
    first = FakeTransport(4000, "alice")
    peers.connection_made(first)
    first.closing = True
    peers.connection_made(FakeTransport(4000, "mallory"))
    assert peers.common_name(("127.0.0.1", 4000)) == "mallory"
