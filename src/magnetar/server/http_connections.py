"""The HTTP ports' open connections, found by a request's two addresses.

uvicorn hands the app a request's addresses (the ASGI scope's ``client`` and ``server``)
but not its connection, and two things need the connection: the verified client
certificate of an HTTPS request (``AuthenticationProviderTls``) and a ``/metrics`` scrape,
whose text a child process writes to the connection's socket itself. So the HTTP
protocol class records each connection here when it is made and forgets it when it is
lost. The pair of addresses is unique among open connections, over all the HTTP ports
(one client address alone is not: a client may use one port towards two servers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Address = tuple[str, int]


class Transport(Protocol):
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...

    def is_closing(self) -> bool: ...

    def get_write_buffer_size(self) -> int: ...


class HttpConnections:
    def __init__(self) -> None:
        self._open: dict[tuple[Address, Address], Transport] = {}

    def connection_made(self, transport: Transport) -> tuple[Address, Address] | None:
        """Records the connection; returns its key, for :meth:`connection_lost`. A connection
        reset before it was handed over has no addresses left (uvloop raises for them): it
        is not recorded, and its protocol still starts, so the server closes it as usual."""
        try:
            key = _key(transport.get_extra_info("peername"), transport.get_extra_info("sockname"))
        except OSError:
            return None
        if key is not None:
            self._open[key] = transport
        return key

    def connection_lost(self, key: tuple[Address, Address] | None, transport: Transport) -> None:
        if key is not None and self._open.get(key) is transport:
            del self._open[key]

    def of_request(self, scope: Mapping[str, Any]) -> Transport | None:
        """The open connection that brought the request of this ASGI scope, if known."""
        key = _key(scope.get("client"), scope.get("server"))
        found = self._open.get(key) if key is not None else None
        if found is None or found.is_closing():
            return None
        return found

    def __len__(self) -> int:
        return len(self._open)


def _key(peer: Any, local: Any) -> tuple[Address, Address] | None:
    peer_address, local_address = _address(peer), _address(local)
    if peer_address is None or local_address is None:
        return None
    return peer_address, local_address


def _address(value: Any) -> Address | None:
    """(host, port) of a socket address or an ASGI scope's address; None for anything else."""
    if isinstance(value, (tuple, list)) and len(value) >= 2:
        try:
            return str(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    return None


def remembering(protocol_class: type[Any], connections: HttpConnections) -> type[Any]:
    """An HTTP protocol class that records its connection in ``connections`` while open."""

    class RememberingProtocol(protocol_class):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            self._remembered = (connections.connection_made(transport), transport)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            connections.connection_lost(*self._remembered)
            super().connection_lost(exc)

    return RememberingProtocol
