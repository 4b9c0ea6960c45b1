"""TLS end to end: ``pulsar+ssl://`` with the official client, HTTPS admin, client
certificates, and ``AuthenticationProviderTls``."""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger, wait_until
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing.broker_process import BrokerProcess, free_port
from magnetar.testing.tls_certs import Pki, make_pki

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki: Pki, **extra: str) -> dict[str, str]:
    return {"brokerServicePortTls": str(free_port()), "webServicePortTls": str(free_port()),
            "tlsCertificateFilePath": str(pki.server_cert), "tlsKeyFilePath": str(pki.server_key), **extra}


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("tls") / "data"
    proc = BrokerProcess(data, tls_settings(pki, brokerServicePort="", tlsProtocols="TLSv1.2,TLSv1.3")).start()
    yield proc
    proc.kill()


def tls_url(broker: BrokerProcess) -> str:
    return f"pulsar+ssl://127.0.0.1:{broker.config['brokerServicePortTls']}"


def https_url(broker: BrokerProcess) -> str:
    return f"https://127.0.0.1:{broker.config['webServicePortTls']}"


def round_trip(url: str, pki: Pki, auth: pulsar.Authentication | None = None) -> None:
    client = pulsar.Client(url, tls_trust_certs_file_path=str(pki.ca), authentication=auth,
                           operation_timeout_seconds=5, logger=quiet_logger())
    try:
        topic = new_topic("tls")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"encrypted")
        assert consumer.receive(timeout_millis=5000).data() == b"encrypted"
    finally:
        client.close()


def test_the_official_client_over_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    round_trip(tls_url(tls_broker), pki)


def test_the_plain_port_is_off_when_empty(tls_broker: BrokerProcess) -> None:
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", tls_broker.port), timeout=2):
        pass


def test_https_admin_and_lookup_answer_tls_urls(tls_broker: BrokerProcess, pki: Pki) -> None:
    with httpx.Client(base_url=https_url(tls_broker), verify=str(pki.ca), timeout=10) as admin:
        assert admin.get("/admin/v2/tenants").json() == ["public"]
        found = admin.get("/lookup/v2/topic/persistent/public/default/x").json()
        cluster = admin.get("/admin/v2/clusters/standalone").json()
    assert found["brokerUrlTls"] == tls_url(tls_broker)
    assert found["httpUrlTls"] == https_url(tls_broker)
    assert cluster["brokerServiceUrlTls"] == tls_url(tls_broker)
    assert httpx.get(f"{tls_broker.web_url}/admin/v2/tenants").status_code == 200  # the plain web port stays


def test_an_https_scrape_is_whole(tls_broker: BrokerProcess, pki: Pki) -> None:
    """A TLS connection's bytes belong to its session, so its scrape's text passes through
    the loop (a plain scrape's is written to the socket by the child that makes it)."""
    client = pulsar.Client(tls_url(tls_broker), tls_trust_certs_file_path=str(pki.ca),
                           operation_timeout_seconds=5, logger=quiet_logger())
    topic = new_topic("scraped-over-tls")
    try:
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    with httpx.Client(base_url=https_url(tls_broker), verify=str(pki.ca), timeout=30) as admin:
        for _ in range(2):  # the connection is kept for the second
            response = admin.get("/metrics")
            assert response.status_code == 200
            names = {family.name for family in text_string_to_metric_families(response.text)}
            assert {"process_virtual_memory_bytes", "pulsar_in_messages", "pulsar_ml_cache_used_size"} <= names
            assert f'topic="{topic}"' in response.text


def test_a_client_that_does_not_trust_the_ca_fails(tls_broker: BrokerProcess, tmp_path: Path) -> None:
    stranger = make_pki(tmp_path)
    client = pulsar.Client(tls_url(tls_broker), tls_trust_certs_file_path=str(stranger.ca),
                           operation_timeout_seconds=3, logger=quiet_logger())
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(new_topic("untrusted"))
    finally:
        client.close()


def test_client_certificates_and_the_tls_provider(tmp_path: Path, pki: Pki) -> None:
    settings = tls_settings(pki, tlsTrustCertsFilePath=str(pki.ca), tlsRequireTrustedClientCertOnConnect="true",
                            authenticationEnabled="true", authenticationProviders=TLS_PROVIDER,
                            authorizationEnabled="true", superUserRoles="client-role")
    with BrokerProcess(tmp_path / "data", settings) as broker:
        url = tls_url(broker)
        round_trip(url, pki, pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)))
        with pytest.raises(pulsar.PulsarException):
            round_trip(url, pki)  # no client certificate: the handshake fails
        (tmp_path / "other").mkdir()
        other = make_pki(tmp_path / "other", client_name="elsewhere")
        with pytest.raises(pulsar.PulsarException):  # a certificate from another CA
            round_trip(url, pki, pulsar.AuthenticationTLS(str(other.client_cert), str(other.client_key)))


def test_https_requests_authenticate_with_their_client_certificate(tmp_path: Path, pki: Pki) -> None:
    """AuthenticationProviderTls on HTTP: the verified certificate's CN is the role; a
    request without one (certificates asked for, not required) has no role."""
    settings = tls_settings(pki, tlsTrustCertsFilePath=str(pki.ca), authenticationEnabled="true",
                            authenticationProviders=TLS_PROVIDER, authorizationEnabled="true",
                            superUserRoles="client-role")
    with BrokerProcess(tmp_path / "data", settings) as broker:
        def status(cert: tuple[Path, Path] | None, path: str = "/admin/v2/tenants/public") -> int:
            context = ssl.create_default_context(cafile=str(pki.ca))
            if cert is not None:
                context.load_cert_chain(*cert)
            with httpx.Client(base_url=https_url(broker), verify=context, timeout=10) as admin:
                return admin.get(path).status_code
        super_user, other = (pki.client_cert, pki.client_key), (pki.other_cert, pki.other_key)
        assert status(super_user) == 200
        assert status(super_user, "/admin/v2/clusters/standalone") == 200
        assert status(other) == 403  # authenticated as other-role, which administers nothing
        assert status(None) == 401
        assert status(super_user) == 200


@pytest.mark.parametrize(("settings", "message"), [
    ({"tlsCertificateFilePath": "/no/such/cert.pem"}, "tlsCertificateFilePath='/no/such/cert.pem': no such file"),
    ({"tlsCiphers": "NOT-A-CIPHER"}, "tlsCiphers='NOT-A-CIPHER': no usable cipher"),
])
def test_bad_tls_settings_stop_the_broker(tmp_path: Path, pki: Pki, settings: dict[str, str], message: str) -> None:
    proc = BrokerProcess(tmp_path / "data", {**tls_settings(pki), **settings})
    with pytest.raises(RuntimeError, match=message):
        proc.start(timeout_s=20)


def served_certificate(port: int) -> str:
    return ssl.get_server_certificate(("127.0.0.1", port))


def test_changed_certificate_files_are_served_to_new_connections(tmp_path_factory: pytest.TempPathFactory) -> None:
    first = make_pki(tmp_path_factory.mktemp("pki-first"))
    second = make_pki(tmp_path_factory.mktemp("pki-second"))
    live = tmp_path_factory.mktemp("live")
    cert, key = live / "broker.cert.pem", live / "broker.key.pem"
    shutil.copy(first.server_cert, cert)
    shutil.copy(first.server_key, key)
    settings = tls_settings(first, tlsCertificateFilePath=str(cert), tlsKeyFilePath=str(key),
                            tlsCertRefreshCheckDurationSec="1")
    proc = BrokerProcess(tmp_path_factory.mktemp("refresh") / "data", settings).start()
    try:
        port = int(settings["brokerServicePortTls"])
        client = pulsar.Client(tls_url(proc), tls_trust_certs_file_path=str(first.ca), operation_timeout_seconds=5,
                               logger=quiet_logger())
        producer = client.create_producer(new_topic("refresh"))
        before = served_certificate(port)
        shutil.copy(second.server_key, key)
        shutil.copy(second.server_cert, cert)
        wait_until(lambda: served_certificate(port) != before, what="the new certificate served")
        assert served_certificate(port) == second.server_cert.read_text()
        producer.send(b"the connection made before the change goes on")
        client.close()
        round_trip(tls_url(proc), second)
    finally:
        proc.kill()
