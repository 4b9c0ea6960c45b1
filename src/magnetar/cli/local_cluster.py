"""``magnetar local-cluster``: a cluster on one machine, to try one.

A ZooKeeper server (Debian's ``zookeeper`` package) unless ``--metadata-store`` names a
running one, the cluster's records (``initialize-cluster-metadata``), and N ``magnetar broker``
processes over one data directory, broker i on ports ``base + 2i`` (pulsar://) and
``base + 2i + 1`` (http://). Ctrl-C or SIGTERM stops the brokers (each hands its bundles
over, as on its own SIGTERM) and then the ZooKeeper server it started.

Every child runs in a session of its own: a terminal's Ctrl-C reaches this process alone,
which stops the brokers before the metadata store they release their bundles in.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from magnetar.cli.cluster_init import ClusterInit, check_cluster_name, initialize
from magnetar.core.metadata.store_url import parse_metadata_store_url
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.zookeeper_process import ZooKeeperProcess, zookeeper_unavailable

#: what ``magnetar local-cluster`` prints once every broker serves
READY_LINE = "magnetar local-cluster ready"


class BadInput(ValueError):
    """An argument that cannot work: the command says why and exits with 2."""


@dataclass(frozen=True)
class LocalClusterPlan:
    brokers: int
    data_dir: Path
    cluster: str = "local-cluster"
    base_port: int = 6650
    metadata_store: str | None = None

    def ports(self) -> list[tuple[int, int]]:
        """Each broker's (service, web) ports."""
        return [(self.base_port + 2 * i, self.base_port + 2 * i + 1) for i in range(self.brokers)]

    def check(self) -> None:
        """Raise :class:`BadInput` for what would fail once processes run."""
        if self.brokers < 1:
            raise BadInput(f"--brokers {self.brokers}: at least 1")
        check_cluster_name(self.cluster)
        last = self.base_port + 2 * self.brokers - 1
        if self.base_port < 1 or last > 65535:
            raise BadInput(f"--base-port {self.base_port}: {self.brokers} brokers need ports "
                           f"{self.base_port} to {last}, within 1 to 65535")
        if self.metadata_store is not None:
            parse_metadata_store_url(self.metadata_store, key="--metadata-store")
        elif (reason := zookeeper_unavailable()) is not None:
            raise BadInput(f"cannot start ZooKeeper: {reason} (or give --metadata-store zk:host:port)")
        busy = [port for pair in self.ports() for port in pair if not _port_free(port)]
        if busy:
            raise BadInput(f"port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} in use on 127.0.0.1: "
                           "stop what holds them or choose another --base-port")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker's listeners do
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Stop(Exception):
    """Raised by the signal handler to end the start-up or the wait."""


class LocalCluster:
    def __init__(self, plan: LocalClusterPlan, echo: Callable[[str], None]) -> None:
        self.plan = plan
        self.echo = echo
        self.zookeeper: ZooKeeperProcess | None = None
        self.brokers: list[BrokerProcess] = []
        self._stopping = False
        self._woken = threading.Event()

    def run(self) -> int:
        """Start, serve until SIGINT or SIGTERM, stop; the exit code."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                self._start()
                return self._serve()
            except _Stop:
                return 0
            finally:
                self._stopping = True
                self._stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self._stopping:
            self._stopping = True
            raise _Stop

    def _start(self) -> None:
        plan = self.plan
        plan.data_dir.mkdir(parents=True, exist_ok=True)
        url = plan.metadata_store
        if url is None:
            self.zookeeper = ZooKeeperProcess(plan.data_dir / "zookeeper", new_session=True)
            self.zookeeper.start()
            url = self.zookeeper.url()
            self.echo(f"ZooKeeper on {self.zookeeper.hosts}, data in {self.zookeeper.data_dir}")
        first_service, first_web = plan.ports()[0]
        for line in initialize(ClusterInit(plan.cluster, url, f"http://127.0.0.1:{first_web}",
                                           f"pulsar://127.0.0.1:{first_service}")):
            self.echo(line)
        settings = {"metadataStoreUrl": url, "clusterName": plan.cluster}
        logs = plan.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        for service, web in plan.ports():
            broker = BrokerProcess(plan.data_dir, settings, subcommand="broker", ports=(service, web),
                                   log_path=logs / f"broker-{service}.log", new_session=True)
            self.brokers.append(broker)
            broker.start(timeout_s=60.0)
        self.echo(f"{READY_LINE}: cluster {plan.cluster}, metadata store {url}, data in {plan.data_dir}")
        for number, broker in enumerate(self.brokers, 1):
            self.echo(f"broker {number}: {broker.service_url} {broker.web_url} (log {broker.log_path})")
        self.echo("Ctrl-C stops them all")

    def _serve(self) -> int:
        """Wait for a signal; a broker that exits on its own stops the others (exit code 1)."""
        while True:
            for number, broker in enumerate(self.brokers, 1):
                assert broker.proc is not None
                if (code := broker.proc.poll()) is not None:
                    self.echo(f"broker {number} exited with {code}; stopping the others "
                              f"(log {broker.log_path}):\n{broker.log_tail(10)}")
                    return 1
            self._woken.wait(0.5)

    def _stop(self) -> None:
        for broker in self.brokers:  # all at once: each hands its bundles over as it goes
            if broker.proc is not None and broker.proc.poll() is None:
                broker.proc.send_signal(signal.SIGTERM)
        for broker in self.brokers:
            try:
                broker.stop()
            except subprocess.TimeoutExpired:  # it was killed; stop the rest
                pass
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.brokers or self.zookeeper is not None:
            self.echo("stopped")


def run_local_cluster(plan: LocalClusterPlan, echo: Callable[[str], None]) -> int:
    """The exit code: 0 after a signal stopped it, 1 when a broker exited by itself. Bad input
    raises ``ValueError`` before anything starts; a part that cannot start raises
    ``RuntimeError``, ``TimeoutError`` or ``MetadataError`` once what started is stopped."""
    plan.check()
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries; a failure is reported once
    return LocalCluster(plan, echo).run()
