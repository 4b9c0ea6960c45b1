"""The broker's authentication service: one provider per auth method, as configured.

Pulsar's ``AuthenticationService``: a binary CONNECT names its method
(``auth_method_name``), an HTTP request its scheme (``Bearer`` is a token, ``Basic``
user:password). Credentials for a configured method must be valid; no credentials, or
a method no provider serves, get ``anonymousUserRole`` when one is set.
"""

from __future__ import annotations

import base64
import binascii
from typing import Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.security.identity import AuthenticationFailed, Identity

HTTP_SCHEMES = {"bearer": "token", "basic": "basic"}


class Provider(Protocol):
    method: str

    def authenticate(self, data: bytes) -> Identity: ...


class AuthenticationService:
    def __init__(self, providers: list[Provider], anonymous_role: str = "") -> None:
        self.providers = {provider.method: provider for provider in providers}
        self.anonymous_role = anonymous_role

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AuthenticationService | None:
        """None when authentication is off; a ConfigError when a key or file is unusable."""
        if not config.authenticationEnabled:
            return None
        providers: list[Provider] = []
        for method in config.authentication_methods:
            if method == "token":
                from magnetar.security.tokens import TokenProvider
                providers.append(TokenProvider.from_config(config))
            elif method == "basic":
                from magnetar.security.basic import BasicProvider
                providers.append(BasicProvider.from_config(config))
            elif method == "tls":
                from magnetar.security.tls import TlsProvider
                providers.append(TlsProvider())
        return cls(providers, config.anonymousUserRole)

    def authenticate(self, method: str, data: bytes) -> Identity:
        """A binary connection's CONNECT or AUTH_RESPONSE credentials."""
        provider = self.providers.get(method)
        if provider is None:
            return self._anonymous(f"no authentication provider for method {method!r}")
        return provider.authenticate(data)

    def authenticate_http(self, authorization: str | None, common_name: str = "") -> Identity:
        """An HTTP request's ``Authorization`` header, else the common name of the client
        certificate its TLS connection verified (``AuthenticationProviderTls``)."""
        if not authorization:
            if common_name and "tls" in self.providers:
                return self.providers["tls"].authenticate(common_name.encode("utf-8"))
            return self._anonymous("no Authorization header")
        scheme, _, credentials = authorization.strip().partition(" ")
        method = HTTP_SCHEMES.get(scheme.lower())
        if method is None or method not in self.providers:
            raise AuthenticationFailed(f"unsupported Authorization scheme {scheme!r}")
        data = credentials.strip().encode("utf-8")
        if method == "basic":
            data = _base64(data)
        return self.providers[method].authenticate(data)

    def _anonymous(self, why: str) -> Identity:
        if not self.anonymous_role:
            raise AuthenticationFailed(f"{why}, and no anonymousUserRole is configured")
        return Identity(self.anonymous_role, "anonymous")


def _base64(data: bytes) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise AuthenticationFailed("Basic credentials are not base64") from None
