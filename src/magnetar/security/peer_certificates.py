"""Who is on the other end of a TLS connection.

The binary protocol reads its connection's verified client certificate directly. HTTP
requests reach the app through uvicorn, whose ASGI scope carries the request's addresses
but not its certificate; ``AuthenticationProviderTls`` on HTTP finds the request's
connection by those addresses (:mod:`magnetar.server.http_connections`) and reads it there.
"""

from __future__ import annotations

import ssl
from typing import Any


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

