"""``magnetar tokens``: keys and tokens the broker's token provider accepts, and bad input."""

from __future__ import annotations

import base64
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from magnetar.cli.main import app
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.security.identity import AuthenticationFailed
from magnetar.security.token_keys import create_token
from magnetar.security.tokens import TokenProvider

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["tokens", *args])
    return result.exit_code, result.output


def provider(**config: str) -> TokenProvider:
    return TokenProvider.from_config(BrokerConfig(authenticationEnabled=True, **config))  # type: ignore[arg-type]


def test_a_secret_key_signs_a_token_the_broker_accepts(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    assert run("create-secret-key", "--output", str(key))[0] == 0
    assert len(key.read_bytes()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    code, token = run("create", "--secret-key", f"file://{key}", "--subject", "alice")
    assert code == 0
    assert provider(tokenSecretKey=f"file://{key}").authenticate(token.strip().encode()).role == "alice"


def test_base64_secret_keys_and_the_hs512_size() -> None:
    code, out = run("create-secret-key", "--base64", "-sa", "HS512")
    assert code == 0 and len(base64.b64decode(out.strip())) == 64


@pytest.mark.parametrize("algorithm", ["RS256", "PS384", "ES256", "ES512"])
def test_a_key_pair_signs_tokens_its_public_key_verifies(tmp_path: Path, algorithm: str) -> None:
    private, public = tmp_path / "private.der", tmp_path / "public.der"
    code, _ = run("create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public),
                  "-sa", algorithm)
    assert code == 0
    code, token = run("create", "--private-key", str(private), "--subject", "bob", "-sa", algorithm)
    assert code == 0
    shown_code, shown = run("show", token.strip())
    assert shown_code == 0 and f'"alg": "{algorithm}"' in shown and '"sub": "bob"' in shown
    assert provider(tokenPublicKey=f"file://{public}").authenticate(token.strip().encode()).role == "bob"


def test_an_expiry_time_makes_tokens_that_expire(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    run("create-secret-key", "--output", str(key))
    code, token = run("create", "--secret-key", str(key), "--subject", "carol", "--expiry-time", "1h")
    assert code == 0
    claims = run("show", token.strip())[1]
    exp = int(claims.split('"exp": ')[1].split()[0].rstrip(","))
    assert 3590 <= exp - time.time() <= 3610
    expired = create_token(key.read_bytes(), "HS256", "carol", 60, now_s=time.time() - 120)
    with pytest.raises(AuthenticationFailed):
        provider(tokenSecretKey=str(key)).authenticate(expired.encode())


@pytest.mark.parametrize(("args", "message"), [
    (["create", "--subject", "x"], "exactly one of --secret-key and --private-key"),
    (["create", "--subject", "x", "--secret-key", "/no/such/key"], "cannot read /no/such/key"),
    (["create", "--subject", "x", "--secret-key", "c2VjcmV0", "-sa", "RS256"], "does not fit a secret key"),
    (["create", "--subject", "x", "--secret-key", "c2VjcmV0", "--expiry-time", "soon"], "is not a duration"),
    (["create", "--subject", "", "--secret-key", "c2VjcmV0"], "--subject must not be empty"),
    (["create", "--subject", "x", "--private-key", "data:;base64,bm90IGEga2V5"], "not a PEM or DER private key"),
    (["create-secret-key", "-sa", "RS256"], "a secret key is for HS256"),
    (["show", "not.a.jwt"], "not a JWT"),
])
def test_bad_input_is_one_clear_error(args: list[str], message: str) -> None:
    code, out = run(*args)
    assert code != 0
    assert message in out


def test_a_key_pair_refuses_an_unknown_algorithm(tmp_path: Path) -> None:
    code, out = run("create-key-pair", "--output-private-key", str(tmp_path / "a"), "--output-public-key",
                    str(tmp_path / "b"), "-sa", "HS256")
    assert code != 0 and "a key pair is for RS256" in out
    assert not (tmp_path / "a").exists()
