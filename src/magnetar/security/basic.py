"""``user:password`` authentication: Pulsar's ``AuthenticationProviderBasic``.

The binary protocol carries ``user:password`` as the CONNECT's auth data; HTTP carries
it base64-encoded after ``Authorization: Basic``. A bcrypt check costs tens of
milliseconds by design, and an admin client sends the header on every request, so a
successful check is remembered under an HMAC of the credentials with a key that lives
only in this process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.security import htpasswd
from magnetar.security.identity import AuthenticationFailed, Identity
from magnetar.security.sources import read_source

_CACHE_LIMIT = 4096


class BasicProvider:
    method = "basic"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self._cache_key = secrets.token_bytes(32)
        self._verified: set[bytes] = set()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> BasicProvider:
        raw = read_source("basicAuthConf", config.basicAuthConf)
        return cls(htpasswd.parse_htpasswd(raw.decode("utf-8", errors="replace")))

    def authenticate(self, data: bytes) -> Identity:
        try:
            user, sep, password = data.decode("utf-8").partition(":")
        except UnicodeDecodeError:
            raise AuthenticationFailed("credentials are not UTF-8") from None
        if not sep or not user:
            raise AuthenticationFailed("expected user:password")
        if not self._check(user, password):
            raise AuthenticationFailed("Unknown user or invalid password")
        return Identity(user, self.method)

    def _check(self, user: str, password: str) -> bool:
        hashed = self.users.get(user)
        if hashed is None:
            return False
        fingerprint = hmac.new(self._cache_key, f"{user}\0{password}\0{hashed}".encode(), hashlib.sha256).digest()
        if fingerprint in self._verified:
            return True
        if not htpasswd.verify(password, hashed):
            return False
        if len(self._verified) >= _CACHE_LIMIT:
            self._verified.clear()
        self._verified.add(fingerprint)
        return True
