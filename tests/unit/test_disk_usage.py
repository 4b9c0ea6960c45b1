"""Appends refused above diskUsageThreshold, a warning above diskUsageWarnThreshold."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig, ConfigError
from magnetar.core.policies.disk_usage import DiskUsage


def test_states_and_the_lines_worth_logging() -> None:
    disk = DiskUsage(threshold=0.95, warn_threshold=0.90)
    assert disk.update(50, 100) is None and disk.refusal() is None
    assert "above diskUsageWarnThreshold 90%" in (disk.update(91, 100) or "")
    assert disk.update(92, 100) is None, "no change, nothing to log"
    assert "appends are refused" in (disk.update(95, 100) or "")
    assert "Not enough disk space: disk usage 95.0%" in (disk.refusal() or "")
    assert "taken again" in (disk.update(10, 100) or "")
    assert disk.refusal() is None and not disk.warning


def test_an_empty_reading_refuses_nothing() -> None:
    disk = DiskUsage(threshold=0.95, warn_threshold=0.9)
    disk.update(0, 0)
    assert disk.refusal() is None


@pytest.mark.parametrize("values", [
    {"diskUsageThreshold": "1.5"},
    {"diskUsageThreshold": "0"},
    {"diskUsageWarnThreshold": "0.99"},
    {"diskUsageThreshold": "full"},
    {"diskCheckInterval": "0"},
])
def test_bad_disk_settings_are_refused(values: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="disk"):
        BrokerConfig().with_overrides(values)
