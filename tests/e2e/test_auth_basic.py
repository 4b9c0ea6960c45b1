"""Basic authentication end to end: ``pulsar.AuthenticationBasic`` against an htpasswd file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import bcrypt
import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger
from security_helpers import BASIC_PROVIDER

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def basic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("basic")
    users = root / "htpasswd"
    users.write_text(f"alice:{bcrypt.hashpw(b'wonderland', bcrypt.gensalt(4)).decode()}\n"
                     "bob:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n")
    proc = BrokerProcess(root / "data", {"authenticationEnabled": "true", "authenticationProviders": BASIC_PROVIDER,
                                         "basicAuthConf": str(users)}).start()
    yield proc
    proc.kill()


def round_trip(broker: BrokerProcess, user: str, password: str) -> None:
    client = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationBasic(user, password),
                           operation_timeout_seconds=5, logger=quiet_logger())
    try:
        topic = new_topic("basic")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hi")
        assert consumer.receive(timeout_millis=5000).data() == b"hi"
    finally:
        client.close()


@pytest.mark.parametrize(("user", "password"), [("alice", "wonderland"), ("bob", "secret")])
def test_known_users_connect(basic_broker: BrokerProcess, user: str, password: str) -> None:
    round_trip(basic_broker, user, password)


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "secret")])
def test_wrong_passwords_are_refused(basic_broker: BrokerProcess, user: str, password: str) -> None:
    with pytest.raises(pulsar.PulsarException):
        round_trip(basic_broker, user, password)


def test_http_basic(basic_broker: BrokerProcess) -> None:
    url = f"{basic_broker.web_url}/admin/v2/clusters"
    assert httpx.get(url, auth=("alice", "wonderland")).status_code == 200
    assert httpx.get(url, auth=("alice", "nope")).status_code == 401
    assert httpx.get(url).status_code == 401


def test_a_bad_htpasswd_line_stops_the_broker(tmp_path: Path) -> None:
    users = tmp_path / "htpasswd"
    users.write_text("alice:plaintext-password\n")
    proc = BrokerProcess(tmp_path / "data", {"authenticationEnabled": "true",
                                             "authenticationProviders": BASIC_PROVIDER, "basicAuthConf": str(users)})
    with pytest.raises(RuntimeError, match="line 1: unsupported password hash for 'alice'"):
        proc.start(timeout_s=20)
