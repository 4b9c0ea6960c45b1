"""JWT validation: algorithms follow the key, never the token; bad tokens and keys are refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security.identity import AuthenticationFailed
from magnetar.security.tokens import TokenProvider

SECRET = b"a-secret-of-thirty-two-bytes-or-more!!"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def provider(**settings: str) -> TokenProvider:
    config = BrokerConfig().with_overrides({"authenticationEnabled": "true", "authenticationProviders":
                                           "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                                           **settings})
    return TokenProvider.from_config(config)


def hs(claims: dict[str, object], secret: bytes = SECRET, alg: str = "HS256") -> bytes:
    return jwt.encode(claims, secret, algorithm=alg).encode()


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_hmac_tokens_give_the_subject_as_role(alg: str) -> None:
    identity = provider(tokenSecretKey=data_url(SECRET)).authenticate(hs({"sub": "alice"}, alg=alg))
    assert identity.role == "alice" and identity.method == "token" and identity.expires_at_ms is None


def test_expiry_is_reported_and_enforced() -> None:
    tokens = provider(tokenSecretKey=data_url(SECRET))
    exp = int(time.time()) + 60
    assert tokens.authenticate(hs({"sub": "a", "exp": exp})).expires_at_ms == exp * 1000
    with pytest.raises(AuthenticationFailed, match="expired"):
        tokens.authenticate(hs({"sub": "a", "exp": int(time.time()) - 10}))


@pytest.mark.parametrize("bad", [b"", b"   ", b"not-a-jwt", b"a.b.c", b"\xff\xfe", b"e30.e30.",
                                 b"eyJhbGciOiJIUzI1NiJ9..x"])
def test_malformed_tokens_are_refused(bad: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        provider(tokenSecretKey=data_url(SECRET)).authenticate(bad)


def test_a_token_signed_with_another_secret_is_refused() -> None:
    with pytest.raises(AuthenticationFailed, match="Signature verification failed"):
        provider(tokenSecretKey=data_url(SECRET)).authenticate(hs({"sub": "a"}, secret=b"x" * 40))


def _unsigned(claims: dict[str, object], header: dict[str, object]) -> bytes:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part(header)}.{part(claims)}.".encode()


@pytest.mark.parametrize("key", ["secret", "rsa"])
def test_alg_none_is_refused(key: str) -> None:
    tokens = provider(tokenSecretKey=data_url(SECRET)) if key == "secret" else \
        provider(tokenPublicKey=data_url(pem(RSA_KEY)))
    with pytest.raises(AuthenticationFailed):
        tokens.authenticate(_unsigned({"sub": "root"}, {"alg": "none", "typ": "JWT"}))


def test_an_hs_token_signed_with_the_public_key_bytes_is_refused() -> None:
    """Algorithm confusion: the attacker knows the public key and signs HS256 with it."""
    public = pem(RSA_KEY)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(b'{"sub":"root"}').rstrip(b"=")
    mac = hmac.new(public, header + b"." + body, hashlib.sha256).digest()
    signature = base64.urlsafe_b64encode(mac).rstrip(b"=")
    with pytest.raises(AuthenticationFailed, match="alg value is not allowed"):
        provider(tokenPublicKey=data_url(public)).authenticate(header + b"." + body + b"." + signature)


@pytest.mark.parametrize("alg", ["RS256", "RS512", "PS256"])
def test_rsa_tokens_verify_with_the_public_key(alg: str) -> None:
    signed = jwt.encode({"sub": "svc"}, RSA_KEY, algorithm=alg).encode()
    assert provider(tokenPublicKey=data_url(pem(RSA_KEY))).authenticate(signed).role == "svc"


def test_der_public_keys_from_a_file_are_accepted(tmp_path: Path) -> None:
    der = EC_KEY.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.key").write_bytes(der)
    signed = jwt.encode({"sub": "ec"}, EC_KEY, algorithm="ES256").encode()
    assert provider(tokenPublicKey=f"file://{tmp_path}/public.key").authenticate(signed).role == "ec"


def test_an_rsa_token_is_refused_by_an_ec_key() -> None:
    signed = jwt.encode({"sub": "svc"}, RSA_KEY, algorithm="RS256").encode()
    with pytest.raises(AuthenticationFailed):
        provider(tokenPublicKey=data_url(pem(EC_KEY))).authenticate(signed)


def test_role_claim_and_audience() -> None:
    tokens = provider(tokenSecretKey=data_url(SECRET), tokenAuthClaim="role", tokenAudienceClaim="aud",
                      tokenAudience="magnetar")
    assert tokens.authenticate(hs({"role": ["ops", "x"], "aud": ["other", "magnetar"]})).role == "ops"
    assert tokens.authenticate(hs({"role": "ops", "aud": "magnetar"})).role == "ops"
    for claims in ({"role": "ops", "aud": "elsewhere"}, {"role": "ops"}, {"sub": "x", "aud": "magnetar"},
                   {"role": 7, "aud": "magnetar"}):
        with pytest.raises(AuthenticationFailed):
            tokens.authenticate(hs(claims))


@pytest.mark.parametrize(("settings", "message"), [
    ({"tokenPublicKey": "data:;base64,bm90IGEga2V5"}, "not a PEM or DER public key"),
    ({"tokenPublicKey": "data:;base64,***"}, "not valid base64"),
    ({"tokenPublicKey": "data:nocomma"}, "needs a ','"),
    ({"tokenSecretKey": "file:///no/such/file"}, "cannot read /no/such/file"),
    ({"tokenSecretKey": "%%% not base64 %%%"}, "neither a file"),
    ({"tokenPublicKey": data_url(pem(ed25519.Ed25519PrivateKey.generate()))}, "unsupported key type"),
])
def test_unusable_keys_are_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        provider(**settings)


def test_a_token_beyond_the_size_bound_is_refused_before_decoding() -> None:
    from magnetar.security.tokens import MAX_TOKEN_BYTES, TokenProvider
    provider = TokenProvider(b"k" * 32, ["HS256"])
    with pytest.raises(AuthenticationFailed, match="longer than"):
        provider.authenticate(b"a" * (MAX_TOKEN_BYTES + 1))
