"""The official Java client and admin client (tests/java, Maven and JUnit 5) against real
Magnetar brokers: one plain, one with TLS and token authentication, one with mTLS."""

from __future__ import annotations

from pathlib import Path

import pytest
from client_suites import TESTS, brokers, need_tool, run_suite


@pytest.mark.timeout(1200)
def test_the_java_client_suite(tmp_path: Path) -> None:
    mvn = need_tool("mvn")
    need_tool("java")
    with brokers(tmp_path, secure=True) as env:
        run_suite([mvn, "-q", "-B", "test"], TESTS / "java", env, timeout_s=1140)
