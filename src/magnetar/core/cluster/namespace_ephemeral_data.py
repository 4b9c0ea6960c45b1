"""What a bundle's ownership node holds: the owner and how clients reach it.

Pulsar's ``NamespaceEphemeralData`` (the value of ``/namespace/<tenant>/<ns>/<range>``),
with its JSON field names, so a Pulsar operator reading the node recognises it. Magnetar
adds ``brokerId``, which names the owner independently of its URLs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field


class InvalidOwnerData(ValueError):
    """An ownership node whose value is not NamespaceEphemeralData."""


@dataclass(frozen=True)
class ListenerUrls:
    service_url: str | None
    service_url_tls: str | None = None


@dataclass(frozen=True)
class NamespaceEphemeralData:
    broker_id: str
    native_url: str | None
    native_url_tls: str | None = None
    http_url: str | None = None
    http_url_tls: str | None = None
    #: an owner that is unloading the bundle (Pulsar's ``disabled``)
    disabled: bool = False
    advertised_listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)

    def service_urls(self, listener: str | None) -> ListenerUrls | None:
        """The owner's URLs for the client's listener (its own when none is named), or
        ``None`` when the owner does not advertise that listener."""
        if not listener:
            return ListenerUrls(self.native_url, self.native_url_tls)
        return self.advertised_listeners.get(listener)

    def web_url(self, tls: bool) -> str | None:
        return self.http_url_tls if tls else self.http_url

    def to_json(self) -> bytes:
        listeners = {name: {"brokerServiceUrl": urls.service_url, "brokerServiceUrlTls": urls.service_url_tls}
                     for name, urls in sorted(self.advertised_listeners.items())}
        return json.dumps({
            "brokerId": self.broker_id, "nativeUrl": self.native_url, "nativeUrlTls": self.native_url_tls,
            "httpUrl": self.http_url, "httpUrlTls": self.http_url_tls, "disabled": self.disabled,
            "advertisedListeners": listeners}, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> NamespaceEphemeralData:
        try:
            value = json.loads(data)
            listeners = {name: ListenerUrls(urls.get("brokerServiceUrl"), urls.get("brokerServiceUrlTls"))
                         for name, urls in (value.get("advertisedListeners") or {}).items()}
            return cls(str(value["brokerId"]), value.get("nativeUrl"), value.get("nativeUrlTls"),
                       value.get("httpUrl"), value.get("httpUrlTls"), bool(value.get("disabled", False)),
                       listeners)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidOwnerData(f"ownership node holds no NamespaceEphemeralData: {data[:80]!r}") from exc
