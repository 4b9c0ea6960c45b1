"""A real ZooKeeper server (Debian's ``zookeeper`` package, 3.8) on a free loopback port
with a data directory of its own, for tests and for trying a cluster on one machine.

The server is ZooKeeper's standalone main class run by ``java`` on the package's jar (its
manifest names every jar it needs); :func:`zookeeper_unavailable` says why none can be run.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from magnetar.testing.broker_process import free_port

#: where Debian's ``zookeeper`` package puts the server's jar
ZOOKEEPER_JAR = Path(os.environ.get("MAGNETAR_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


@dataclass(frozen=True)
class QuorumPeer:
    """One server of an ensemble as the others reach it."""

    client_port: int
    peer_port: int
    election_port: int


def zookeeper_unavailable() -> str | None:
    """Why no ZooKeeper server can be started here, None when one can."""
    if shutil.which("java") is None:
        return "no java on PATH to run ZooKeeper"
    if not ZOOKEEPER_JAR.is_file():
        return f"ZooKeeper is not installed ({ZOOKEEPER_JAR} missing; apt-get install zookeeper)"
    return None


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send ZooKeeper a four-letter command (``ruok``, ``srvr``) and return its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _end_with_parent() -> None:
    """In the child: Linux ends the server when the process that started it dies, so a test
    run killed outright leaves no JVM behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


_PR_SET_PDEATHSIG = 1


def expire_session(hosts: str, client_id: tuple[int, bytes], timeout_s: float = 10.0) -> None:
    """Make ZooKeeper expire a session now, as it does one silent past its timeout: a second
    client joins the session with its id and password and closes it (ZooKeeper's own tests
    do the same). The first client then hears that its session is lost."""
    from kazoo.client import KazooClient

    twin = KazooClient(hosts=hosts, client_id=client_id)
    twin.start(timeout=timeout_s)
    twin.stop()
    twin.close()


class ZooKeeperProcess:
    """One ZooKeeper server; :meth:`start` waits until it answers, :meth:`stop` ends it.
    Stopped, it keeps its port and data, so a restart finds the same tree and sessions."""

    def __init__(self, data_dir: Path | None = None, *, tick_time_ms: int = 500, new_session: bool = False,
                 quorum: Sequence[QuorumPeer] = (), my_id: int = 0) -> None:
        """``new_session``: the server in a session of its own, out of reach of a terminal's Ctrl-C.
        ``quorum``: every server of an ensemble, this one the ``my_id``-th (from 1)."""
        self._owned_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="magnetar-zk-")) if data_dir is None else data_dir
        self.quorum = tuple(quorum)
        self.my_id = my_id
        self.port = self.quorum[my_id - 1].client_port if self.quorum else free_port()
        self.tick_time_ms = tick_time_ms
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def hosts(self) -> str:
        """``127.0.0.1:port``, as kazoo takes it."""
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        """The ``metadataStoreUrl`` of this server, under ``chroot`` if one is given."""
        return f"zk:{self.hosts}{chroot}"

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "forceSync=no\n" + self._quorum_config(),
            encoding="utf-8",
        )
        return config

    def _quorum_config(self) -> str:
        if not self.quorum:
            return ""
        (self.data_dir / "data" / "myid").write_text(f"{self.my_id}\n", encoding="ascii")
        servers = "".join(f"server.{i}=127.0.0.1:{peer.peer_port}:{peer.election_port}\n"
                          for i, peer in enumerate(self.quorum, start=1))
        return "initLimit=10\nsyncLimit=5\n" + servers

    def mode(self) -> str | None:
        """``leader``, ``follower`` or ``standalone`` as the server says, None while it does not serve."""
        try:
            answer = four_letter_word(self.port, "srvr", timeout_s=0.5)
        except OSError:
            return None
        modes = [line.split(":", 1)[1].strip() for line in answer.splitlines() if line.startswith("Mode:")]
        return modes[0] if modes else None

    def start(self, timeout_s: float = 30.0) -> ZooKeeperProcess:
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to serve (an ensemble's servers serve
        only once enough of them run)."""
        reason = zookeeper_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        config = self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dzookeeper.log.dir={self.data_dir}", "-cp", str(ZOOKEEPER_JAR),
             _QUORUM_MAIN_CLASS if self.quorum else _MAIN_CLASS, str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_end_with_parent,
            start_new_session=self.new_session,
        )
        log.close()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.log_path}")
            try:
                # ``ruok`` answers before the server serves; ``srvr`` says when it does
                if four_letter_word(self.port, "srvr", timeout_s=0.5).startswith("Zookeeper version"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer on port {self.port} within {timeout_s} s; "
                                   f"see {self.log_path}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Kill the server (a JVM takes seconds over a clean exit; what it wrote is in its log
        files all the same, so a restart finds its tree and sessions)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout_s)
        self.proc = None

    def close(self) -> None:
        """Stop the server and remove a data directory this object made."""
        self.stop()
        if self._owned_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
