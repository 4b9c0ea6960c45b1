"""``magnetar local-cluster``: a ZooKeeper and N brokers started, served through, and stopped
by one command, as a user runs it."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.broker_process import free_port
from magnetar.testing.zookeeper_process import zookeeper_unavailable

CLI = [sys.executable, "-m", "magnetar.cli", "local-cluster"]
BROKER_LINE = re.compile(r"^broker (\d+): (pulsar://\S+) (http://\S+)")


def _free_base(count: int) -> int:
    """A port with the ``count`` ports from it free on loopback."""
    for _ in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise AssertionError("no run of free ports found")


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    reason = zookeeper_unavailable()
    if reason is not None:
        pytest.skip(f"needs ZooKeeper: {reason}")
    proc = subprocess.Popen([*CLI, "--brokers", "2", "--data-dir", str(tmp_path / "data"),
                             "--base-port", str(_free_base(4))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    children: set[int] = set()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            children = _children(proc.pid)
            proc.kill()
            proc.wait(10)
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _read_until_ready(lines: queue.Queue[str], proc: subprocess.Popen[str], timeout_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if line == "Ctrl-C stops them all":
            return seen
    raise AssertionError(f"local-cluster not ready within {timeout_s} s (exit {proc.poll()}):\n" + "\n".join(seen))


@pytest.mark.timeout(180)
def test_two_brokers_serve_and_stop_on_ctrl_c(
        local_cluster: tuple[subprocess.Popen[str], queue.Queue[str]]) -> None:
    proc, lines = local_cluster
    output = _read_until_ready(lines, proc, timeout_s=120)
    brokers = [m.groups() for line in output if (m := BROKER_LINE.match(line))]
    assert [number for number, _, _ in brokers] == ["1", "2"], output
    assert len({url for _, url, _ in brokers}) == 2
    children = _children(proc.pid)
    assert len(children) == 3, children  # ZooKeeper and two brokers

    topic = f"persistent://public/default/local-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(brokers[1][1], operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        producer.send(b"through the second broker")
        message = consumer.receive(timeout_millis=15000)
        assert message.data() == b"through the second broker"
        consumer.acknowledge(message)
    finally:
        client.close()

    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    rest: list[str] = []
    while not lines.empty():
        rest.append(lines.get())
    assert "stopped" in rest, rest
    assert [pid for pid in children if _alive(pid)] == []


@pytest.mark.parametrize(("args", "says"), [
    (["--brokers", "0"], "--brokers 0: at least 1"),
    (["--brokers", "2", "--metadata-store", "etcd:127.0.0.1:2379"], "--metadata-store"),
    (["--brokers", "1", "--cluster", "a/b", "--metadata-store", "zk:127.0.0.1:2181"], "--cluster 'a/b'"),
    (["--brokers", "2", "--metadata-store", "zk:127.0.0.1"], "--metadata-store"),
    (["--brokers", "2", "--base-port", "65534", "--metadata-store", "zk:127.0.0.1:2181"], "within 1 to 65535"),
    (["--brokers", "2", "--base-port", "HELD", "--metadata-store", "zk:127.0.0.1:2181"], "in use"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    with socket.socket() as held:  # a listener on the port the "in use" case names
        held.bind(("127.0.0.1", 0))
        held.listen()
        argv = [str(held.getsockname()[1]) if arg == "HELD" else arg for arg in args]
        done = subprocess.run([*CLI, *argv, "--data-dir", str(tmp_path / "data")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()  # nothing started, nothing made
