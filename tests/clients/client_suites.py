"""Brokers and environment for the official Java and Go client suites (tests/java, tests/go).

The suites read the broker's addresses from ``MAGNETAR_*`` environment variables; this module
starts the brokers, runs a suite's own build tool and reports its output when it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from magnetar.testing.broker_process import BrokerProcess, free_port
from magnetar.testing.tls_certs import make_pki

TESTS = Path(__file__).resolve().parent.parent
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed: the official client suite needs it")
    return path


def _tls(server_cert: Path, server_key: Path, **extra: str) -> dict[str, str]:
    return {"brokerServicePortTls": str(free_port()), "webServicePortTls": str(free_port()),
            "tlsCertificateFilePath": str(server_cert), "tlsKeyFilePath": str(server_key), **extra}


@contextmanager
def brokers(tmp: Path, secure: bool) -> Iterator[dict[str, str]]:
    """A plain broker, and with ``secure`` one with TLS and token authentication and one with
    TLS and client certificates (mTLS); yields the environment naming them."""
    for name in ("plain", "token", "mtls", "scratch"):
        (tmp / name).mkdir()
    with ExitStack() as stack:
        plain = BrokerProcess(tmp / "plain" / "data")
        plain.start()
        stack.callback(plain.kill)
        env = {"MAGNETAR_SERVICE_URL": plain.service_url, "MAGNETAR_WEB_URL": plain.web_url,
               "MAGNETAR_PYTHON": sys.executable, "MAGNETAR_SCRATCH": str(tmp / "scratch")}
        if secure:
            import jwt  # the tests' extra, as in tests/e2e/security_helpers.py

            (tmp / "pki").mkdir()
            pki = make_pki(tmp / "pki")
            secret = b"magnetar-java-client-suite-secret-0123456789"
            token_broker = BrokerProcess(tmp / "token" / "data", _tls(
                pki.server_cert, pki.server_key, authenticationEnabled="true",
                authenticationProviders=TOKEN_PROVIDER, tokenSecretKey="data:;base64," + _b64(secret)))
            mtls_broker = BrokerProcess(tmp / "mtls" / "data", _tls(
                pki.server_cert, pki.server_key, tlsTrustCertsFilePath=str(pki.ca),
                tlsRequireTrustedClientCertOnConnect="true", authenticationEnabled="true",
                authenticationProviders=TLS_PROVIDER, authorizationEnabled="true", superUserRoles="client-role"))
            for broker in (token_broker, mtls_broker):
                broker.start()
                stack.callback(broker.kill)
            env.update({
                "MAGNETAR_TLS_CA": str(pki.ca),
                "MAGNETAR_TOKEN_URL": f"pulsar+ssl://localhost:{token_broker.config['brokerServicePortTls']}",
                "MAGNETAR_TOKEN_WEB_URL": f"https://localhost:{token_broker.config['webServicePortTls']}",
                "MAGNETAR_TOKEN": jwt.encode({"sub": "java-client"}, secret, algorithm="HS256"),
                "MAGNETAR_MTLS_URL": f"pulsar+ssl://localhost:{mtls_broker.config['brokerServicePortTls']}",
                "MAGNETAR_CLIENT_CERT": str(pki.client_cert), "MAGNETAR_CLIENT_KEY": str(pki.client_key),
                "MAGNETAR_OTHER_CERT": str(pki.other_cert), "MAGNETAR_OTHER_KEY": str(pki.other_key),
            })
        yield env


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def run_suite(cmd: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> float:
    """Runs a suite's command; fails the test with its output when it exits non-zero. Returns
    the seconds it took."""
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    took = time.monotonic() - start
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode} after {took:.0f}s:\n{output[-20000:]}",
                    pytrace=False)
    print(f"{' '.join(cmd)}: {took:.1f}s\n{output[-4000:]}")
    return took
