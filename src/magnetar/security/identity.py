"""Who a connection or request authenticated as."""

from __future__ import annotations

from dataclasses import dataclass


class AuthenticationFailed(Exception):
    """Credentials were missing, malformed or wrong; the message is for the broker's log."""


@dataclass(frozen=True)
class Identity:
    role: str
    #: the auth method that proved it: ``token``, ``basic``, ``tls`` or ``anonymous``
    method: str
    #: when the credentials stop being valid (ms since the epoch), None for never
    expires_at_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms
