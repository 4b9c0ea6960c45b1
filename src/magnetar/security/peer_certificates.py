"""Who is on the other end of a TLS connection, for the HTTP side.

The binary protocol reads its connection's verified client certificate directly. HTTP
requests reach the app through uvicorn, whose ASGI scope carries the client's address but
not its certificate; so the HTTPS port's connections are remembered here by that address
when their handshake completes, and ``AuthenticationProviderTls`` on HTTP looks the
request's address up. An address is unique among open connections; closed ones are
forgotten the next time a connection is made, so the table never holds more than the
open connections and those closed since.
"""

from __future__ import annotations

import ssl
from typing import Any, Protocol


class Transport(Protocol):
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...

    def is_closing(self) -> bool: ...


def peer_common_name(ssl_object: ssl.SSLObject | None) -> str:
    """The CN of a verified client certificate, "" without one."""
    if ssl_object is None:
        return ""
    cert: dict[str, Any] = dict(ssl_object.getpeercert() or {})
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def _address(peer: Any) -> tuple[str, int] | None:
    if isinstance(peer, (tuple, list)) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return None


class PeerCertificates:
    """Verified client-certificate common names of open TLS connections, by address."""

    def __init__(self) -> None:
        self._by_address: dict[tuple[str, int], tuple[Transport, str]] = {}

    def connection_made(self, transport: Transport) -> None:
        self._forget_closed()
        address = _address(transport.get_extra_info("peername"))
        name = peer_common_name(transport.get_extra_info("ssl_object"))
        if address is not None and name:
            self._by_address[address] = (transport, name)

    def common_name(self, client: Any) -> str:
        """The CN for a request from ``client`` (the ASGI scope's address), "" if none."""
        address = _address(client)
        found = self._by_address.get(address) if address is not None else None
        if found is None or found[0].is_closing():
            return ""
        return found[1]

    def __len__(self) -> int:
        return len(self._by_address)

    def _forget_closed(self) -> None:
        closed = [address for address, (transport, _) in self._by_address.items() if transport.is_closing()]
        for address in closed:
            del self._by_address[address]


def remembering(protocol_class: type[Any], peers: PeerCertificates) -> type[Any]:
    """An HTTP protocol class that records each connection in ``peers`` before serving it."""

    class RememberingProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            peers.connection_made(transport)
            super().connection_made(transport)

    return RememberingProtocol
