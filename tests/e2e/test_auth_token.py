"""Token authentication end to end: the official client with ``AuthenticationToken``
against a broker with ``AuthenticationProviderToken``, on the binary protocol and HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger
from security_helpers import SECRET_DATA_URL, TOKEN_PROVIDER, token

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection
from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("auth") / "data"
    proc = BrokerProcess(data, {"authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
                                "tokenSecretKey": SECRET_DATA_URL, "authenticationRefreshCheckSeconds": "1"}).start()
    yield proc
    proc.kill()


def client_with(broker: BrokerProcess, auth: pulsar.Authentication | None) -> pulsar.Client:
    return pulsar.Client(broker.service_url, authentication=auth, operation_timeout_seconds=5,
                         logger=quiet_logger())


def test_a_valid_token_produces_and_consumes(auth_broker: BrokerProcess) -> None:
    client = client_with(auth_broker, pulsar.AuthenticationToken(token("alice", expires_in_s=3600)))
    try:
        topic = new_topic("tok")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(timeout_millis=5000).data() == b"hello"
    finally:
        client.close()


@pytest.mark.parametrize("credentials", [
    None,
    token("alice", secret=b"another secret of enough length for hs256!"),
    token("alice", expires_in_s=-60),
    "not.a.jwt",
], ids=["none", "another-secret", "expired", "not-a-jwt"])  # an expiry in an id differs between workers
def test_missing_or_bad_tokens_are_refused(auth_broker: BrokerProcess, credentials: str | None) -> None:
    auth = None if credentials is None else pulsar.AuthenticationToken(credentials)
    client = client_with(auth_broker, auth)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(new_topic("refused"))
    finally:
        client.close()


def connect_raw(broker: BrokerProcess, method: str, data: bytes) -> pb.BaseCommand:
    with RawConnection.to_service(broker.service_url) as raw:
        raw.send_command(pb.BaseCommand(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="raw", protocol_version=21, auth_method_name=method, auth_data=data)))
        frame = raw.next_frame()
        assert frame is not None
        return frame.command


def test_a_bad_token_gets_pulsars_authentication_error(auth_broker: BrokerProcess) -> None:
    reply = connect_raw(auth_broker, "token", b"garbage")
    assert reply.type == T.ERROR
    assert reply.error.error == pb.AuthenticationError
    assert reply.error.message == "Failed to authenticate"
    ok = connect_raw(auth_broker, "token", token("bob").encode())
    assert ok.type == T.CONNECTED


def test_an_alg_none_token_is_refused(auth_broker: BrokerProcess) -> None:
    unsigned = token("root").rsplit(".", 1)[0].split(".", 1)[1]
    none_token = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + unsigned + "."
    assert connect_raw(auth_broker, "token", none_token.encode()).type == T.ERROR


def test_an_oversized_token_is_refused_and_the_broker_goes_on(auth_broker: BrokerProcess) -> None:
    huge = token("alice", padding="x" * (1024 * 1024)).encode()
    for _ in range(3):
        reply = connect_raw(auth_broker, "token", huge)
        assert reply.type == T.ERROR and reply.error.error == pb.AuthenticationError
    url = f"{auth_broker.web_url}/admin/v2/tenants"
    try:  # the HTTP server refuses a megabyte of headers: a 4xx, or it closes before reading them all
        assert 400 <= httpx.get(url, headers={"Authorization": f"Bearer {huge.decode()}"}).status_code < 500
    except httpx.TransportError:
        pass
    assert connect_raw(auth_broker, "token", token("bob").encode()).type == T.CONNECTED
    assert httpx.get(url, headers={"Authorization": f"Bearer {token('alice')}"}).status_code == 200


def test_http_needs_a_bearer_token(auth_broker: BrokerProcess) -> None:
    url = f"{auth_broker.web_url}/admin/v2/tenants"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    bad = httpx.get(url, headers={"Authorization": f"Bearer {token('x', expires_in_s=-5)}"})
    assert bad.status_code == 401 and bad.json() == {"reason": "Authentication required"}
    good = httpx.get(url, headers={"Authorization": f"Bearer {token('alice')}"})
    assert good.status_code == 200
    assert "public" in good.json()
    assert httpx.get(f"{auth_broker.web_url}/metrics").status_code == 200


def test_an_expiring_token_is_refreshed_through_auth_challenge(auth_broker: BrokerProcess) -> None:
    handed_out: list[str] = []

    def supplier() -> str:
        handed_out.append(token("carol", expires_in_s=2))
        return handed_out[-1]

    client = client_with(auth_broker, pulsar.AuthenticationToken(supplier))
    try:
        topic = new_topic("refresh")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        time.sleep(5)  # past the first token's expiry: challenged and refreshed
        producer.send(b"after refresh")
        assert consumer.receive(timeout_millis=5000).data() == b"after refresh"
        assert len(handed_out) >= 2
    finally:
        client.close()


def test_a_connection_that_cannot_refresh_is_closed(auth_broker: BrokerProcess) -> None:
    with RawConnection.to_service(auth_broker.service_url, timeout_s=8) as raw:
        flags = pb.FeatureFlags(supports_auth_refresh=True)
        raw.send_command(pb.BaseCommand(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="raw", protocol_version=21, auth_method_name="token",
            auth_data=token("dave", expires_in_s=1).encode(), feature_flags=flags)))
        raw.expect(T.CONNECTED)
        challenge = raw.expect(T.AUTH_CHALLENGE, timeout_s=5)
        assert challenge.command.authChallenge.challenge.auth_data == b"PulsarAuthRefresh"
        expired = token("dave", expires_in_s=-1).encode()
        raw.send_command(pb.BaseCommand(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(
            response=pb.AuthData(auth_method_name="token", auth_data=expired), protocol_version=21)))
        error = raw.expect(T.ERROR)
        assert error.command.error.error == pb.AuthenticationError
        assert raw.wait_closed(5)


def test_misconfigured_token_keys_stop_the_broker_with_a_clear_error(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", {"authenticationEnabled": "true",
                                             "authenticationProviders": TOKEN_PROVIDER,
                                             "tokenPublicKey": "data:;base64,bm90IGEga2V5"})
    with pytest.raises(RuntimeError, match="tokenPublicKey: not a PEM or DER public key"):
        proc.start(timeout_s=20)


def test_the_admin_command_sends_a_token(auth_broker: BrokerProcess) -> None:
    from typer.testing import CliRunner

    from magnetar.cli.main import app
    runner = CliRunner()
    base = ["admin", "--admin-url", auth_broker.web_url]
    refused = runner.invoke(app, [*base, "tenants", "list"])
    assert refused.exit_code != 0 and "HTTP 401" in refused.output
    allowed = runner.invoke(app, [*base, "--auth-token", token("admin", expires_in_s=600), "tenants", "list"])
    assert allowed.exit_code == 0, allowed.output
    assert "public" in allowed.output
    from_env = runner.invoke(app, [*base, "tenants", "list"],
                             env={"MAGNETAR_AUTH_TOKEN": token("admin", expires_in_s=600)})
    assert from_env.exit_code == 0 and "public" in from_env.output
