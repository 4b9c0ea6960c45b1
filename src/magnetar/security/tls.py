"""TLS: server SSL contexts from Pulsar's ``tls*`` keys, and ``AuthenticationProviderTls``.

One context serves both TLS ports (binary and HTTP). Client certificates are asked for
when ``tlsTrustCertsFilePath`` names a CA: required with
``tlsRequireTrustedClientCertOnConnect``, otherwise verified when a client sends one.
``tlsAllowInsecureConnection`` lets clients whose certificates would not verify connect,
as in Pulsar; such certificates then prove nothing, so none is asked for at all.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security.identity import AuthenticationFailed, Identity

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """The SSL context of the TLS ports; a ConfigError naming the file that is unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_chain(context, config)
    protocols = config.tls_protocols
    if protocols:
        versions = sorted(_VERSIONS[p] for p in protocols)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
    else:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.tlsCiphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in config.tlsCiphers.split(",") if c.strip()))
        except ssl.SSLError:
            raise ConfigError(f"tlsCiphers={config.tlsCiphers!r}: no usable cipher") from None
    _client_certificates(context, config)
    return context


class CertificateRefresh:
    """Re-reads the certificate, key and trusted CAs when their files change
    (``tlsCertRefreshCheckDurationSec``): new handshakes use them, open connections go on.
    A file caught half-written fails to load; the old certificate stays until the next check."""

    def __init__(self, context: ssl.SSLContext, config: BrokerConfig) -> None:
        self.context = context
        self.config = config
        self._seen = self._stamps()

    def _stamps(self) -> tuple[float, ...]:
        paths = (self.config.tlsCertificateFilePath, self.config.tlsKeyFilePath, self.config.tlsTrustCertsFilePath)
        stamps = []
        for path in paths:
            try:
                stamps.append(Path(path).stat().st_mtime if path else 0.0)
            except OSError:
                stamps.append(-1.0)
        return tuple(stamps)

    def check(self) -> str | None:
        """Reload if a file changed; what happened, for the log (None: nothing changed)."""
        stamps = self._stamps()
        if stamps == self._seen:
            return None
        try:
            _load_chain(self.context, self.config)
            if self.config.tlsTrustCertsFilePath and self.context.verify_mode != ssl.CERT_NONE:
                self.context.load_verify_locations(cafile=self.config.tlsTrustCertsFilePath)
        except ConfigError as exc:
            return f"TLS certificate files changed but cannot be loaded, keeping the old ones: {exc}"
        self._seen = stamps
        return "TLS certificate files changed: reloaded for new connections"


def _load_chain(context: ssl.SSLContext, config: BrokerConfig) -> None:
    for key in ("tlsCertificateFilePath", "tlsKeyFilePath"):
        path = getattr(config, key)
        if not Path(path).is_file():
            raise ConfigError(f"{key}={path!r}: no such file")
    try:
        context.load_cert_chain(config.tlsCertificateFilePath, config.tlsKeyFilePath)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tlsCertificateFilePath/tlsKeyFilePath: cannot load the certificate and key "
                          f"({exc})") from None


def _client_certificates(context: ssl.SSLContext, config: BrokerConfig) -> None:
    if not config.tlsTrustCertsFilePath or (config.tlsAllowInsecureConnection
                                            and not config.tlsRequireTrustedClientCertOnConnect):
        context.verify_mode = ssl.CERT_NONE
        return
    try:
        context.load_verify_locations(cafile=config.tlsTrustCertsFilePath)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tlsTrustCertsFilePath={config.tlsTrustCertsFilePath!r}: cannot load ({exc})") from None
    context.verify_mode = ssl.CERT_REQUIRED if config.tlsRequireTrustedClientCertOnConnect else ssl.CERT_OPTIONAL


class TlsProvider:
    """The role is the common name of the client's verified certificate: the connection
    hands over that name, never bytes the client sent."""

    method = "tls"

    def authenticate(self, data: bytes) -> Identity:
        common_name = data.decode("utf-8", errors="replace")
        if not common_name:
            raise AuthenticationFailed("no verified client certificate with a common name")
        return Identity(common_name, self.method)
