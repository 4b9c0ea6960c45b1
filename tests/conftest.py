from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if "/e2e/" in path and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120))
        # Under pytest-xdist's ``--dist loadgroup`` (CI's two workers) a module's tests stay on
        # one worker, so a module-scoped broker starts once; the Spark suite shares one
        # SparkSession and one broker for the whole session, so it is one group.
        item.add_marker(pytest.mark.xdist_group("spark" if "/spark/" in path else path))
