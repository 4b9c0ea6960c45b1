"""Broker configuration files: Pulsar's ``standalone.conf`` / ``broker.conf`` format.

A file (key=value, ``#`` comments) is read as it is: keys Magnetar honours are typed and
checked by :class:`~magnetar.core.broker.broker_config.BrokerConfig`, the rest are ignored with
one log line naming them, so an existing Pulsar config file works unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.cluster.load_balancer_config import LOAD_BALANCER_KEYS

log = logging.getLogger("magnetar.config")

__all__ = ["load_config", "parse_properties"]


def parse_properties(text: str, source: str = "<config>") -> dict[str, str]:
    """Java-properties style ``key=value`` lines; ``#`` and ``!`` start comments."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise ConfigError(f"{source}:{number}: expected key=value, got {stripped!r}")
        values[key.strip()] = value.strip()
    return values


def load_config(path: Path | None, overrides: dict[str, str] | None = None) -> BrokerConfig:
    values: dict[str, str] = {}
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        values = parse_properties(text, str(path))
    values.update(overrides or {})
    config = BrokerConfig().with_overrides(values)
    unused = sorted(key for key in config.extra if key not in LOAD_BALANCER_KEYS)
    if unused:
        log.info("ignoring config keys Magnetar does not use: %s", ", ".join(unused))
    return config
