"""The official Go client (tests/go, github.com/apache/pulsar-client-go) against a real
Magnetar broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from client_suites import TESTS, brokers, need_tool, run_suite


@pytest.mark.timeout(600)
def test_the_go_client_suite(tmp_path: Path) -> None:
    go = need_tool("go")
    with brokers(tmp_path, secure=False) as env:
        run_suite([go, "test", "-count=1", "-v", "./..."], TESTS / "go", env, timeout_s=540)
