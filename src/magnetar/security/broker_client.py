"""The credentials a broker presents when it calls another broker of its cluster: Pulsar's
``brokerClientAuthenticationPlugin`` and ``brokerClientAuthenticationParameters``, as an HTTP
``Authorization`` header (the load manager's leader unloads, transfers and splits the other
brokers' bundles through their admin API).

The parameters take the forms Pulsar's client plugins read:

- ``AuthenticationToken``: ``token:<jwt>``, ``file:///path`` (read at each call, so a token
  replaced on disk is used from the next call on), ``{"token": "<jwt>"}``,
  ``{"file": "///path"}``, or the JWT itself;
- ``AuthenticationBasic``: ``{"userId": "<user>", "password": "<password>"}``.

A value that cannot be used is a :class:`ConfigError` naming the key, at start.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.core.broker.broker_config import BROKER_CLIENT_AUTHENTICATION_PLUGINS, BrokerConfig, ConfigError

KEY = "brokerClientAuthenticationParameters"


@dataclass(frozen=True)
class BrokerClientCredentials:
    #: the ``Authorization`` value; None when it is a token read from ``token_file`` at each call
    authorization: str | None
    token_file: Path | None = None

    def headers(self) -> dict[str, str]:
        """The request headers that carry the broker's credentials (may read the token file)."""
        if self.token_file is None:
            return {"Authorization": self.authorization or ""}
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise RuntimeError(f"{KEY}: cannot read the token file {self.token_file}: {exc.strerror}") from None
        return {"Authorization": f"Bearer {token}"}


def broker_client_credentials(config: BrokerConfig) -> BrokerClientCredentials | None:
    """The broker's own credentials, None when ``brokerClientAuthenticationPlugin`` is unset."""
    plugin = config.brokerClientAuthenticationPlugin
    if not plugin:
        return None
    params = config.brokerClientAuthenticationParameters.strip()
    if BROKER_CLIENT_AUTHENTICATION_PLUGINS[plugin] == "basic":
        return _basic(params)
    return _token(params)


def _token(params: str) -> BrokerClientCredentials:
    if params.startswith("{"):
        found = _json_object(params)
        if isinstance(found.get("token"), str) and found["token"]:
            return BrokerClientCredentials(f"Bearer {found['token']}")
        if isinstance(found.get("file"), str) and found["file"]:
            return _token_file("file:" + found["file"])
        raise ConfigError(f'{KEY}: AuthenticationToken takes {{"token": "..."}} or {{"file": "///path"}}')
    if params.startswith("token:"):
        params = params.removeprefix("token:")
    elif params.startswith("file:"):
        return _token_file(params)
    if not params or any(c.isspace() for c in params):
        raise ConfigError(f"{KEY}: not a token (token:<jwt>, file:///path, or the JWT itself)")
    return BrokerClientCredentials(f"Bearer {params}")


def _token_file(url: str) -> BrokerClientCredentials:
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
    if not path.is_file():
        raise ConfigError(f"{KEY}: the token file {path} does not exist")
    return BrokerClientCredentials(None, path)


def _basic(params: str) -> BrokerClientCredentials:
    found = _json_object(params)
    user, password = found.get("userId"), found.get("password")
    if not (isinstance(user, str) and user and isinstance(password, str)) or ":" in user:
        raise ConfigError(f'{KEY}: AuthenticationBasic takes {{"userId": "...", "password": "..."}} '
                          "(a user id without ':')")
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return BrokerClientCredentials(f"Basic {encoded}")


def _json_object(params: str) -> dict[str, Any]:
    try:
        found = json.loads(params)
    except ValueError:
        raise ConfigError(f"{KEY}: not valid JSON") from None
    if not isinstance(found, dict):
        raise ConfigError(f"{KEY}: a JSON object is expected")
    return found
