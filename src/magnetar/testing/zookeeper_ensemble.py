"""Three (or more) real ZooKeeper servers forming one ensemble on loopback, for tests of what a
cluster does when one server of its metadata store goes.

A production ZooKeeper is an ensemble: it keeps serving while a majority of its servers run,
and a client's session moves to another server when the one it talks to dies. The brokers
get every server's address in ``metadataStoreUrl`` (``zk:h1:p1,h2:p2,h3:p3/chroot``).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from magnetar.testing.broker_process import free_port
from magnetar.testing.zookeeper_process import QuorumPeer, ZooKeeperProcess


class ZooKeeperEnsemble:
    """``size`` servers under ``root``; :meth:`start` returns once every one serves."""

    def __init__(self, root: Path, size: int = 3, *, tick_time_ms: int = 500) -> None:
        peers = [QuorumPeer(free_port(), free_port(), free_port()) for _ in range(size)]
        self.servers = [ZooKeeperProcess(root / f"zk{i}", tick_time_ms=tick_time_ms, quorum=peers, my_id=i)
                        for i in range(1, size + 1)]

    @property
    def hosts(self) -> str:
        return ",".join(server.hosts for server in self.servers)

    def url(self, chroot: str = "") -> str:
        """The ``metadataStoreUrl`` naming every server, under ``chroot`` if one is given."""
        return f"zk:{self.hosts}{chroot}"

    def start(self, timeout_s: float = 60.0) -> ZooKeeperEnsemble:
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_ready(timeout_s)
        return self

    def leader(self) -> ZooKeeperProcess:
        found = [server for server in self.servers if server.proc is not None and server.mode() == "leader"]
        if len(found) != 1:
            raise RuntimeError(f"expected one leader, found {len(found)}")
        return found[0]

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
