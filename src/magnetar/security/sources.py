"""Key material named in a config value, the ways Pulsar accepts it.

``tokenSecretKey``, ``tokenPublicKey`` and ``basicAuthConf`` hold either a URL
(``file:///path``, ``data:;base64,...``), a plain path, or, as Pulsar's
``AuthTokenUtils.readKeyFromUrl`` allows, the base64 of the key itself. A value
starting with ``/`` or ``./`` is always a path, so a mistyped path is reported as one.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from pathlib import Path

from magnetar.core.broker.broker_config import ConfigError


def read_source(key: str, value: str) -> bytes:
    """The bytes ``value`` names; a ConfigError naming ``key`` when they cannot be read."""
    text = value.strip()
    if text.startswith("data:"):
        return _data_url(key, text)
    if text.startswith("file:"):
        return _read_file(key, Path(urllib.parse.unquote(urllib.parse.urlparse(text).path)))
    if text.startswith(("/", "./", "../")) or Path(text).is_file():
        return _read_file(key, Path(text))
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{key}: {text[:40]!r} is neither a file, a file:// or data: URL, "
                          "nor base64") from None


def _data_url(key: str, text: str) -> bytes:
    header, sep, payload = text[len("data:"):].partition(",")
    if not sep:
        raise ConfigError(f"{key}: a data: URL needs a ',' before its payload (data:;base64,...)")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{key}: the data: URL's payload is not valid base64") from None
    return urllib.parse.unquote_to_bytes(payload)


def _read_file(key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None
