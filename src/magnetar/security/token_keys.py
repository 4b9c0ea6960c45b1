"""Keys and tokens for ``AuthenticationProviderToken``, made the way ``pulsar tokens`` makes them.

A secret key is random bytes of the HMAC's size; a key pair is RSA 2048 (RS*/PS*) or the
EC curve of the ES algorithm, written as DER (PKCS#8 private, X.509 public), which is what
Pulsar's tool writes and what ``tokenPublicKey`` reads. A token is a JWT with the role in
``sub`` and, when asked, an ``exp``.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.security.tokens import EC_ALGORITHMS, HMAC_ALGORITHMS, RSA_ALGORITHMS

SECRET_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_CURVES: dict[str, ec.EllipticCurve] = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
PAIR_ALGORITHMS = [*RSA_ALGORITHMS, *_CURVES]


class TokenToolError(ValueError):
    """A key or token cannot be made from what was given; the message says why."""


def create_secret_key(algorithm: str = "HS256") -> bytes:
    if algorithm not in SECRET_KEY_BYTES:
        raise TokenToolError(f"--signature-algorithm {algorithm}: a secret key is for {', '.join(HMAC_ALGORITHMS)}")
    return secrets.token_bytes(SECRET_KEY_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private key, public key), both DER."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in _CURVES:
        private = ec.generate_private_key(_CURVES[algorithm])
    else:
        raise TokenToolError(f"--signature-algorithm {algorithm}: a key pair is for {', '.join(PAIR_ALGORITHMS)}")
    return (private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
            private.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo))


def load_private_key(data: bytes) -> Any:
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise TokenToolError(f"--private-key: not a PEM or DER private key without a password ({exc})") from None


def signing_algorithm(key: Any, asked: str | None) -> str:
    """The algorithm a private key signs with: the one asked for if the key can, else its default."""
    if isinstance(key, rsa.RSAPrivateKey):
        allowed = RSA_ALGORITHMS
    elif isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in EC_ALGORITHMS:
        allowed = EC_ALGORITHMS[key.curve.name]
    else:
        raise TokenToolError(f"--private-key: unsupported key type {type(key).__name__}; use RSA or EC")
    if asked is None:
        return allowed[0]
    if asked not in allowed:
        raise TokenToolError(f"--signature-algorithm {asked} does not fit this key; use {', '.join(allowed)}")
    return asked


def create_token(key: Any, algorithm: str, subject: str, expires_in_s: int | None = None,
                 headers: dict[str, str] | None = None, now_s: float | None = None) -> str:
    if not subject:
        raise TokenToolError("--subject must not be empty")
    claims: dict[str, Any] = {"sub": subject}
    if expires_in_s is not None:
        if expires_in_s <= 0:
            raise TokenToolError("--expiry-time must be positive")
        claims["exp"] = int((time.time() if now_s is None else now_s) + expires_in_s)
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers or None)


def show_token(token: str) -> dict[str, Any]:
    """Header and claims, unverified (``pulsar tokens show``)."""
    try:
        return {"header": jwt.get_unverified_header(token),
                "claims": jwt.decode(token, options={"verify_signature": False})}
    except jwt.PyJWTError as exc:
        raise TokenToolError(f"not a JWT: {exc}") from None
