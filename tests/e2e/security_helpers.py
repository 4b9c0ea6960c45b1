"""Keys, tokens and brokers with authentication on, for the security end-to-end tests."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt

from magnetar.testing.broker_process import BrokerProcess

SECRET = b"0123456789abcdef0123456789abcdef-magnetar-test-secret"
SECRET_DATA_URL = "data:;base64," + base64.b64encode(SECRET).decode()
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
BASIC_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"


def token(role: str, secret: bytes = SECRET, expires_in_s: float | None = None, **claims: object) -> str:
    payload: dict[str, object] = {"sub": role, **claims}
    if expires_in_s is not None:
        payload["exp"] = int(time.time() + expires_in_s)
    return jwt.encode(payload, secret, algorithm="HS256")


def start_broker(tmp: Path, config: dict[str, str]) -> BrokerProcess:
    return BrokerProcess(tmp / "data", config).start()
