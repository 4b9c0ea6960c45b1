"""htpasswd files and user:password checks: the hash formats Pulsar accepts, plus bcrypt."""

from __future__ import annotations

import base64
import subprocess

import bcrypt
import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security import htpasswd
from magnetar.security.authentication import AuthenticationService
from magnetar.security.basic import BasicProvider
from magnetar.security.identity import AuthenticationFailed

BCRYPT = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
APR1 = "$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/"  # openssl passwd -apr1 -salt abcdefgh secret
DES = "abNANd1rDfiNc"  # crypt("secret", "ab")


def test_apr1_matches_openssl() -> None:
    assert htpasswd.apr1(b"secret", b"abcdefgh") == APR1
    try:
        made = subprocess.run(["openssl", "passwd", "-apr1", "-salt", "xyz", "pässword with spaces"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no openssl")
    assert htpasswd.apr1("pässword with spaces".encode(), b"xyz") == made


@pytest.mark.parametrize(("hashed", "password"), [(BCRYPT, "s3cret"), (BCRYPT.replace("$2b$", "$2y$"), "s3cret"),
                                                  (APR1, "secret"), (DES, "secret")],
                         ids=["bcrypt-2b", "bcrypt-2y", "apr1", "des"])
def test_every_format_verifies(hashed: str, password: str) -> None:
    if htpasswd.scheme_of(hashed) is None:
        pytest.skip("no crypt(3) in this Python")
    assert htpasswd.verify(password, hashed)
    assert not htpasswd.verify(password + "x", hashed)
    assert not htpasswd.verify("", hashed)


def test_a_file_is_parsed_with_comments_and_blank_lines() -> None:
    users = htpasswd.parse_htpasswd(f"# users\n\nalice:{BCRYPT}\nbob:{APR1}\n")
    assert users == {"alice": BCRYPT, "bob": APR1}


@pytest.mark.parametrize(("text", "message"), [
    ("alice", "line 1: expected user:hash"),
    ("alice:", "line 1: expected user:hash"),
    (":hash", "line 1: expected user:hash"),
    (f"ok:{APR1}\nbob:a:b", "line 2: expected user:hash"),
    ("alice:plaintext", "line 1: unsupported password hash for 'alice'"),
    ("alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "unsupported password hash"),
    ("alice:$apr1$broken", "unsupported password hash"),
])
def test_bad_lines_are_refused_with_their_number(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        htpasswd.parse_htpasswd(text)


def provider(conf: str) -> BasicProvider:
    return BasicProvider.from_config(BrokerConfig(basicAuthConf=conf))


def test_credentials_are_checked_and_remembered() -> None:
    basic = provider("data:;base64," + base64.b64encode(f"alice:{BCRYPT}\nbob:{APR1}".encode()).decode())
    assert basic.authenticate(b"alice:s3cret").role == "alice"
    assert basic.authenticate(b"alice:s3cret").role == "alice"  # from the remembered check
    assert basic.authenticate(b"bob:secret").role == "bob"
    for bad in (b"alice:wrong", b"carol:s3cret", b"alice", b":s3cret", b"\xff:x", b"", b"bob:secret:"):
        with pytest.raises(AuthenticationFailed):
            basic.authenticate(bad)


def test_http_basic_header() -> None:
    service = AuthenticationService([provider(f"data:,alice:{APR1.replace('$', '%24')}")])
    good = base64.b64encode(b"alice:secret").decode()
    assert service.authenticate_http(f"Basic {good}").role == "alice"
    for header in (f"Basic {base64.b64encode(b'alice:nope').decode()}", "Basic !!!", "Basic", "Bearer x"):
        with pytest.raises(AuthenticationFailed):
            service.authenticate_http(header)


def test_a_missing_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="basicAuthConf: cannot read /no/such/htpasswd"):
        provider("/no/such/htpasswd")
