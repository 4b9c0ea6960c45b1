from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.testing.zookeeper_process import ZooKeeperProcess, zookeeper_unavailable


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker names each item by its group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if "/e2e/" in path and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120))
        # Under pytest-xdist's ``--dist loadgroup`` (CI's two workers) a module's tests stay on
        # one worker, so a module-scoped broker starts once; the Spark suite shares one
        # SparkSession and one broker for the whole session, so it is one group.
        item.add_marker(pytest.mark.xdist_group("spark" if "/spark/" in path else path))


#: why the ZooKeeper tests skipped, said again at the end of the run
_zookeeper_skipped: list[str] = []


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperProcess]:
    """One ZooKeeper server for the whole run; each test keeps to a chroot of its own."""
    reason = zookeeper_unavailable()
    if reason is not None:
        _zookeeper_skipped.append(reason)
        pytest.skip(f"needs ZooKeeper: {reason}")
    with ZooKeeperProcess() as server:
        server.start()
        yield server


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _zookeeper_skipped:
        terminalreporter.write_line(f"ZooKeeper tests skipped: {_zookeeper_skipped[0]}", yellow=True)
