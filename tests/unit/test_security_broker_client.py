"""The broker's own credentials (brokerClientAuthenticationPlugin / ...Parameters): each form
Pulsar's client plugins read, and a clear error for a value that cannot be used."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security.broker_client import broker_client_credentials

TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"


def headers(plugin: str, params: str) -> dict[str, str]:
    config = BrokerConfig().with_overrides({"brokerClientAuthenticationPlugin": plugin,
                                            "brokerClientAuthenticationParameters": params})
    credentials = broker_client_credentials(config)
    assert credentials is not None
    return credentials.headers()


def test_none_by_default() -> None:
    assert broker_client_credentials(BrokerConfig()) is None


@pytest.mark.parametrize("params", ["token:abc.def.ghi", "abc.def.ghi", '{"token": "abc.def.ghi"}',
                                    " token:abc.def.ghi "])
def test_a_token_in_the_parameters(params: str) -> None:
    assert headers(TOKEN, params) == {"Authorization": "Bearer abc.def.ghi"}


def test_a_token_file_is_read_at_each_call(tmp_path: Path) -> None:
    path = tmp_path / "broker.token"
    path.write_text("first.token.x\n")
    for params in (f"file://{path}", f'{{"file": "//{path}"}}'):
        config = BrokerConfig().with_overrides({"brokerClientAuthenticationPlugin": TOKEN,
                                                "brokerClientAuthenticationParameters": params})
        credentials = broker_client_credentials(config)
        assert credentials is not None
        path.write_text("first.token.x\n")
        assert credentials.headers() == {"Authorization": "Bearer first.token.x"}
        path.write_text("second.token.y")
        assert credentials.headers() == {"Authorization": "Bearer second.token.y"}
        path.unlink()
        with pytest.raises(RuntimeError, match="cannot read the token file"):
            credentials.headers()
        path.write_text("x")


def test_basic_credentials() -> None:
    expected = "Basic " + base64.b64encode(b"broker:s3cret:with colon").decode()
    assert headers(BASIC, '{"userId": "broker", "password": "s3cret:with colon"}') == {"Authorization": expected}


@pytest.mark.parametrize(("values", "message"), [
    ({"brokerClientAuthenticationPlugin": "com.example.Nope", "brokerClientAuthenticationParameters": "x"},
     "unknown plugin 'com.example.Nope'"),
    ({"brokerClientAuthenticationPlugin": TOKEN}, "needs brokerClientAuthenticationParameters"),
])
def test_bad_settings_are_refused_at_start(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig().with_overrides(values)


@pytest.mark.parametrize(("plugin", "params", "message"), [
    (TOKEN, "token:", "not a token"),
    (TOKEN, "two words", "not a token"),
    (TOKEN, '{"token": ""}', 'takes {"token"'),
    (TOKEN, '{"token": 1', "not valid JSON"),
    (TOKEN, "file:///nonexistent/broker.token", "does not exist"),
    (BASIC, "broker:password", "not valid JSON"),
    (BASIC, '["broker"]', "a JSON object"),
    (BASIC, '{"userId": "broker"}', 'takes {"userId"'),
    (BASIC, '{"userId": "a:b", "password": "p"}', "without ':'"),
])
def test_unusable_parameters_are_refused(plugin: str, params: str, message: str) -> None:
    config = BrokerConfig().with_overrides({"brokerClientAuthenticationPlugin": plugin,
                                            "brokerClientAuthenticationParameters": params})
    with pytest.raises(ConfigError, match=message):
        broker_client_credentials(config)
