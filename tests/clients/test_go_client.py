"""The official Go client (tests/go, github.com/apache/pulsar-client-go) against a real
Magnetar broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from client_suites import TESTS, brokers, need_tool, run_suite


@pytest.mark.timeout(1200)
def test_the_go_client_suite(tmp_path: Path) -> None:
    go = need_tool("go")
    binary = tmp_path / "compat.test"
    # building first (module download and compile: minutes on a cold cache) keeps the run's own
    # time and the build's apart in the output; without cgo the client compresses ZSTD with its
    # pure Go codec instead of compiling the zstd C library (most of a cold build's CPU time)
    run_suite([go, "test", "-vet=off", "-c", "-o", str(binary), "."], TESTS / "go", {"CGO_ENABLED": "0"},
              timeout_s=1080)
    with brokers(tmp_path, secure=False) as env:
        run_suite([str(binary), "-test.v", "-test.count=1"], TESTS / "go", env, timeout_s=300)
