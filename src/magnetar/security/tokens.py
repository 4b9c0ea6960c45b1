"""JWT authentication: Pulsar's ``AuthenticationProviderToken``.

The accepted algorithms follow from the key alone, never from the token's header: an
HMAC secret accepts HS256/384/512, an RSA public key RS* and PS*, an EC key the ES
algorithm of its curve. So ``alg: none`` and algorithm confusion (an HS token signed
with the public key's bytes) are refused whatever the token claims.
"""

from __future__ import annotations

from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.security.identity import AuthenticationFailed, Identity
from magnetar.security.sources import read_source

HMAC_ALGORITHMS = ["HS256", "HS384", "HS512"]
RSA_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
EC_ALGORITHMS = {"secp256r1": ["ES256"], "secp384r1": ["ES384"], "secp521r1": ["ES512"]}


#: longer credentials are refused before any decoding: real tokens are a few kilobytes, and
#: a megabyte of base64 sent in a loop must not cost the broker a megabyte of work each time
MAX_TOKEN_BYTES = 64 * 1024


class TokenProvider:
    method = "token"

    def __init__(self, key: Any, algorithms: list[str], role_claim: str = "sub",
                 audience_claim: str = "", audience: str = "") -> None:
        self.key = key
        self.algorithms = algorithms
        self.role_claim = role_claim or "sub"
        self.audience_claim = audience_claim
        self.audience = audience

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TokenProvider:
        if config.tokenSecretKey:
            key: Any = read_source("tokenSecretKey", config.tokenSecretKey)
            if not key:
                raise ConfigError("tokenSecretKey: the secret key is empty")
            algorithms = HMAC_ALGORITHMS
        else:
            key, algorithms = public_key(read_source("tokenPublicKey", config.tokenPublicKey))
        return cls(key, algorithms, config.tokenAuthClaim, config.tokenAudienceClaim, config.tokenAudience)

    def authenticate(self, data: bytes) -> Identity:
        if len(data) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            token = data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AuthenticationFailed("the token is not ASCII") from None
        if not token:
            raise AuthenticationFailed("Blank token found")
        claims = self._decode(token)
        self._check_audience(claims)
        exp = claims.get("exp")
        return Identity(self._role(claims), self.method, None if exp is None else int(exp * 1000))

    def _decode(self, token: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(token, self.key, algorithms=self.algorithms,
                                                options={"verify_aud": False})
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"Failed to authenticate token: {exc}") from None
        return claims

    def _check_audience(self, claims: dict[str, Any]) -> None:
        if not self.audience_claim:
            return
        found = claims.get(self.audience_claim)
        audiences = found if isinstance(found, list) else [found]
        if self.audience not in audiences:
            raise AuthenticationFailed(f"Audiences in token: {found!r} do not contain this broker: {self.audience}")

    def _role(self, claims: dict[str, Any]) -> str:
        value = claims.get(self.role_claim)
        if isinstance(value, list) and value:
            value = value[0]
        if not isinstance(value, str) or not value:
            raise AuthenticationFailed(f"the token has no role in claim {self.role_claim!r}")
        return value


def public_key(data: bytes) -> tuple[Any, list[str]]:
    """A PEM or DER (X.509 SubjectPublicKeyInfo, as ``pulsar tokens create-key-pair``
    writes) public key and the algorithms it verifies."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError as exc:
        raise ConfigError(f"tokenPublicKey: not a PEM or DER public key ({exc})") from None
    if isinstance(key, rsa.RSAPublicKey):
        return key, RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in EC_ALGORITHMS:
        return key, EC_ALGORITHMS[key.curve.name]
    raise ConfigError(f"tokenPublicKey: unsupported key type {type(key).__name__}; use RSA or EC "
                      "(P-256, P-384, P-521)")
