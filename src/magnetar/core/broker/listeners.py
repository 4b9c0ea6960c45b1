"""Advertised listeners: the addresses a broker gives clients, by network.

A broker reached through several networks (inside a cluster, through a NAT or a load
balancer) must answer lookups with an address the asking client can reach. Pulsar names
each such network a listener (``advertisedListeners=internal:pulsar://10.0.0.5:6650,
external:pulsar+ssl://broker.example.com:6651``); a client says which it is on
(``listenerName``), and a client that says nothing gets ``internalListenerName``.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.errors import ServiceNotReady

_SCHEMES = ("pulsar://", "pulsar+ssl://")


@dataclass(frozen=True)
class Listener:
    name: str
    broker_url: str | None = None
    broker_url_tls: str | None = None


def parse_listeners(text: str) -> dict[str, Listener]:
    """``name:url,name:url,...``; at most one plain and one TLS address per name."""
    found: dict[str, Listener] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        if not sep or not name or not url.startswith(_SCHEMES) or not url.split("://", 1)[1]:
            raise ConfigError(f"advertisedListeners: {item!r} is not name:pulsar://host:port or "
                              "name:pulsar+ssl://host:port")
        current = found.get(name, Listener(name))
        tls = url.startswith("pulsar+ssl://")
        if (current.broker_url_tls if tls else current.broker_url) is not None:
            raise ConfigError(f"advertisedListeners: listener {name!r} has two {url.split('://')[0]} addresses")
        found[name] = Listener(name, current.broker_url if tls else url, url if tls else current.broker_url_tls)
    return found


def internal_listener(listeners: dict[str, Listener], internal_name: str) -> Listener | None:
    """The listener lookups without a listener name answer with (the first one by default)."""
    if not listeners:
        if internal_name:
            raise ConfigError(f"internalListenerName={internal_name!r} needs advertisedListeners")
        return None
    if not internal_name:
        return next(iter(listeners.values()))
    if internal_name not in listeners:
        raise ConfigError(f"internalListenerName={internal_name!r} is not one of advertisedListeners "
                          f"({', '.join(listeners)})")
    return listeners[internal_name]


def listener_for(listeners: dict[str, Listener], name: str) -> Listener:
    """The listener a client named; Pulsar answers an unknown name with ServiceNotReady."""
    found = listeners.get(name)
    if found is None:
        raise ServiceNotReady(f"the broker do not have {name} listener")
    return found


class BrokerAddresses:
    """The URLs a broker advertises: in lookups, and in its cluster's record."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self.listeners = parse_listeners(config.advertisedListeners)
        self.internal_listener = internal_listener(self.listeners, config.internalListenerName)

    @property
    def broker_url(self) -> str:
        """The plain binary URL; the TLS one when the plain port is off."""
        if self._config.brokerServicePort is None:
            return self.broker_url_tls or ""
        return f"pulsar://{self._config.advertisedAddress}:{self._config.brokerServicePort}"

    @property
    def broker_url_tls(self) -> str | None:
        port = self._config.brokerServicePortTls
        return None if port is None else f"pulsar+ssl://{self._config.advertisedAddress}:{port}"

    @property
    def web_url(self) -> str:
        if self._config.webServicePort is None:
            return self.web_url_tls or ""
        return f"http://{self._config.advertisedAddress}:{self._config.webServicePort}"

    @property
    def web_url_tls(self) -> str | None:
        port = self._config.webServicePortTls
        return None if port is None else f"https://{self._config.advertisedAddress}:{port}"

    def lookup_urls(self, listener_name: str | None) -> tuple[str, str | None]:
        """(plain, TLS) binary URLs for a lookup: the named listener's, else the internal
        listener's when advertisedListeners is set, else advertisedAddress with the ports."""
        if listener_name:
            listener = listener_for(self.listeners, listener_name)
        elif self.internal_listener is not None:
            listener = self.internal_listener
        else:
            return self.broker_url, self.broker_url_tls
        return listener.broker_url or listener.broker_url_tls or "", listener.broker_url_tls
