"""The README's quickstart, run exactly as written against ``magnetar standalone`` on its
default ports, with the official client (``import pulsar``) of the project's environment.

The example is taken from README.md as it stands. The broker and the example run in a
network namespace of their own (``unshare -rn``) so that ports 6650 and 8080 are free
whatever else runs here; without user namespaces the test runs on the machine's own
loopback when both ports are free, and is skipped (saying why) when they are not.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Quickstart with the official client"


def quickstart() -> tuple[str, str]:
    """The quickstart section's text and the Python example in it."""
    text = README.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    section = text[start:end]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the quickstart has no ```python block"
    return section, found.group(1)


def namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_the_quickstart_says_where_the_client_comes_from() -> None:
    section, example = quickstart()
    assert "import pulsar" in example
    assert "pip install pulsar-client" in section
    assert ".venv/bin/python quickstart.py" in section


def test_the_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    _, example = quickstart()
    script = tmp_path / "quickstart.py"
    script.write_text(example)
    command = [sys.executable, "-m", "magnetar.testing.readme_quickstart", str(script), str(tmp_path / "data")]
    if namespaces_work():
        command = ["unshare", "-rn", *command, "--loopback-up"]
    elif not (port_free(6650) and port_free(8080)):
        pytest.skip("no user namespaces here and ports 6650/8080 are taken: the example cannot reach its broker")
    done = subprocess.run(command, capture_output=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert re.search(rb"^b'hello' \(\d+,\d+,-1,-1\)$", done.stdout, re.MULTILINE), done.stdout
