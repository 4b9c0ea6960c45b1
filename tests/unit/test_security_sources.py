"""Key sources as Pulsar names them, and the auth method a CONNECT names."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from magnetar.core.broker.broker_config import ConfigError
from magnetar.security.peer_certificates import peer_common_name
from magnetar.security.sources import read_source
from magnetar.server.connection import auth_method_of
from magnetar.wire import pulsar_api_pb2 as pb


def test_every_form_reads_the_same_bytes(tmp_path: Path) -> None:
    key = tmp_path / "my key.bin"
    key.write_bytes(b"\x00secret\xff")
    encoded = base64.b64encode(b"\x00secret\xff").decode()
    for value in (f"file://{tmp_path}/my%20key.bin", str(key), f"data:;base64,{encoded}",
                  f"data:application/octet-stream;base64,{encoded}", encoded, f"  {str(key)}  "):
        assert read_source("tokenSecretKey", value) == b"\x00secret\xff", value
    assert read_source("basicAuthConf", "data:,alice:%24apr1%24x") == b"alice:$apr1$x"


@pytest.mark.parametrize(("value", "message"), [
    ("./missing.key", "tokenSecretKey: cannot read missing.key"),
    ("file:///nope", "cannot read /nope"),
    ("data:;base64,@@@", "not valid base64"),
    ("data:", "needs a ','"),
    ("plain words", "neither a file"),
])
def test_unreadable_sources_name_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_source("tokenSecretKey", value)


def test_auth_method_of_a_connect() -> None:
    assert auth_method_of(pb.CommandConnect(client_version="c", auth_method_name="token")) == "token"
    assert auth_method_of(pb.CommandConnect(client_version="c", auth_method=pb.AuthMethodYcaV1)) == "ycav1"
    assert auth_method_of(pb.CommandConnect(client_version="c")) == "none"
    assert peer_common_name(None) == ""
