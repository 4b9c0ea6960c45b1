"""A real ``magnetar standalone`` (or ``magnetar broker``) process on free loopback ports,
for tests and benchmarks."""

from __future__ import annotations

import http.client
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

#: what ``magnetar standalone`` prints once every listener is up
READY_LINE = b"magnetar standalone ready"


def ready_line(subcommand: str) -> bytes:
    """What ``magnetar <subcommand>`` prints once every listener is up."""
    return f"magnetar {subcommand} ready".encode()


def checkout_source(checkout: str | Path) -> str:
    """The ``src`` folder of another checkout of Magnetar, to run its broker instead of this
    one (benchmarks comparing versions). A folder without the package would silently run the
    installed broker, so it is refused."""
    source = Path(checkout) / "src"
    if not (source / "magnetar" / "__init__.py").is_file():
        raise ValueError(f"{checkout} is not a checkout of Magnetar: no src/magnetar/__init__.py in it")
    return str(source)


def start_from_checkout(broker: BrokerProcess, checkout: str | None) -> BrokerProcess:
    """Start ``broker`` running the broker of another checkout (None: this one's); the
    environment is as it was afterwards."""
    saved = os.environ.get("PYTHONPATH")
    if checkout:
        os.environ["PYTHONPATH"] = checkout_source(checkout)
    try:
        return broker.start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(self, data_dir: Path, config: dict[str, str] | None = None,
                 config_file: Path | None = None, open_files_limit: int | None = None,
                 subcommand: str = "standalone", *, ports: tuple[int, int] | None = None,
                 log_path: Path | None = None, new_session: bool = False) -> None:
        """``subcommand``: ``standalone``, or ``broker`` for a broker of a cluster (its config
        names the metadata store). ``ports``: the service and web ports, free ones if None;
        ``new_session``: the broker in a session of its own, so a terminal's Ctrl-C reaches
        only the process that started it, which stops it in its turn."""
        self.data_dir = data_dir
        self.subcommand = subcommand
        #: RLIMIT_NOFILE of the broker process (``ulimit -n``), None: inherited
        self.open_files_limit = open_files_limit
        self.port, self.web_port = ports if ports is not None else (free_port(), free_port())
        self.new_session = new_session
        self.config = dict(config or {})
        self.config_file = config_file
        self.proc: subprocess.Popen[bytes] | None = None
        suffix = "" if subcommand == "standalone" else f"-{self.port}"
        self.log_path = log_path or data_dir.parent / f"{data_dir.name}-broker{suffix}.log"
        self._log_start = 0

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def command(self) -> list[str]:
        settings = {"brokerServicePort": str(self.port), "webServicePort": str(self.web_port),
                    "bindAddress": "127.0.0.1", "advertisedAddress": "127.0.0.1", **self.config}
        cmd = [sys.executable, "-m", "magnetar.cli", self.subcommand, "--data-dir", str(self.data_dir)]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout_s: float = 30.0) -> BrokerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self._log_start = log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=self._limit,
                                     start_new_session=self.new_session)
        self.wait_ready(timeout_s)
        return self

    def _limit(self) -> None:
        if self.open_files_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files_limit, self.open_files_limit))

    def open_files(self) -> int:
        """Descriptors the broker process holds now."""
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_bytes(self) -> int:
        """The broker process's resident memory now."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if not self._said_ready():  # before it listens, a connect may meet itself
                time.sleep(0.05)  # (a loopback port of the ephemeral range) and read its own request
                continue
            try:
                with urllib.request.urlopen(f"{self.web_url}/admin/v2/brokers/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
                time.sleep(0.05)
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):  # serving, with authentication on
                    return
                time.sleep(0.05)
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)
        raise TimeoutError(f"broker not ready after {timeout_s}s:\n{self.log_tail()}")

    def _said_ready(self) -> bool:
        """The plain HTTP port answers before the TLS ports listen: the broker says it is
        ready once every listener is up."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return ready_line(self.subcommand) in log.read()
        except OSError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.kill()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
