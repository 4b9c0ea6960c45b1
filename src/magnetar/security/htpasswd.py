"""Password files in Apache's htpasswd format, the file ``basicAuthConf`` names.

Each line is ``user:hash``. Pulsar's ``AuthenticationProviderBasic`` accepts the
``$apr1$`` MD5 scheme (``htpasswd -m``) and traditional DES ``crypt`` (``htpasswd -d``);
bcrypt (``htpasswd -B``, ``$2y$``/``$2b$``/``$2a$``) is accepted too, being the one an
operator should choose. Any other line is refused when the file is loaded, with its
line number, rather than failing every login later.
"""

from __future__ import annotations

import hashlib
import hmac
import warnings

import bcrypt

from magnetar.core.broker.broker_config import ConfigError

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
APR1_PREFIX = "$apr1$"
_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DES_LENGTH = 13


def parse_htpasswd(text: str, source: str = "basicAuthConf") -> dict[str, str]:
    """user -> hash; blank lines and ``#`` comments are skipped."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed or ":" in hashed:
            raise ConfigError(f"{source} line {number}: expected user:hash")
        if scheme_of(hashed) is None:
            raise ConfigError(f"{source} line {number}: unsupported password hash for {user!r}; "
                              "use bcrypt (htpasswd -B), $apr1$ MD5 (htpasswd -m) or crypt (htpasswd -d)")
        users[user] = hashed
    return users


def scheme_of(hashed: str) -> str | None:
    if hashed.startswith(BCRYPT_PREFIXES):
        return "bcrypt"
    if hashed.startswith(APR1_PREFIX) and hashed.count("$") == 3:
        return "apr1"
    if len(hashed) == _DES_LENGTH and all(c in _ITOA64 for c in hashed) and _des_crypt() is not None:
        return "crypt"
    return None


def verify(password: str, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed``; comparisons take constant time."""
    scheme = scheme_of(hashed)
    secret = password.encode("utf-8")
    if scheme == "bcrypt":
        try:
            return bcrypt.checkpw(secret, hashed.encode("ascii"))
        except ValueError:
            return False
    if scheme == "apr1":
        salt = hashed[len(APR1_PREFIX):].split("$", 1)[0]
        return hmac.compare_digest(apr1(secret, salt.encode("ascii")), hashed)
    if scheme == "crypt":
        des = _des_crypt()
        return des is not None and hmac.compare_digest(des(password, hashed[:2]), hashed)
    return False


def apr1(password: bytes, salt: bytes) -> str:
    """Apache's MD5-based crypt (``$apr1$salt$digest``), as ``htpasswd -m`` writes it."""
    salt = salt[:8]
    magic = APR1_PREFIX.encode()
    final = hashlib.md5(password + salt + password).digest()
    ctx = password + magic + salt
    for length in range(len(password), 0, -16):
        ctx += final[:min(16, length)]
    bits = len(password)
    while bits:
        ctx += b"\0" if bits & 1 else password[:1]
        bits >>= 1
    final = hashlib.md5(ctx).digest()
    for i in range(1000):
        step = password if i & 1 else final
        if i % 3:
            step += salt
        if i % 7:
            step += password
        step += final if i & 1 else password
        final = hashlib.md5(step).digest()
    return f"{APR1_PREFIX}{salt.decode('ascii')}${_encode_apr1(final)}"


def _encode_apr1(digest: bytes) -> str:
    out = []
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        out.append(_to64(digest[a] << 16 | digest[b] << 8 | digest[c], 4))
    out.append(_to64(digest[11], 2))
    return "".join(out)


def _to64(value: int, count: int) -> str:
    chars = []
    for _ in range(count):
        chars.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(chars)


def _des_crypt():  # type: ignore[no-untyped-def]
    """The C library's ``crypt`` (DES for two-character salts), where Python still has it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    return crypt.crypt
