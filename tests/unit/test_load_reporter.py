"""A broker's load report from its loaded topics (server/load_reporter.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from magnetar.core.cluster.load_report import ResourceUsage
from magnetar.core.cluster.namespace_bundles import NamespaceBundle, NamespaceBundles
from magnetar.core.names import TopicName
from magnetar.core.stats import RateCounter
from magnetar.server.load_reporter import BundleTotals, build_report, bundle_stats

NOW = 1_000_000


def topic(name: str, msgs_in: int, consumers: int = 1, producers: int = 1) -> Any:
    rate_in = RateCounter()
    rate_in.add(NOW - 2000, msgs_in, msgs_in * 100)
    subs = {"s": SimpleNamespace(consumers=[SimpleNamespace(msg_out=RateCounter()) for _ in range(consumers)])}
    return SimpleNamespace(name=TopicName.parse(name), msg_in=rate_in, subscriptions=subs,
                           producers={f"p{i}": None for i in range(producers)})


def test_each_owned_bundle_sums_its_topics_and_the_others_are_left_out() -> None:
    bundles = NamespaceBundles("t/n").bundles
    by_bundle: dict[NamespaceBundle, list[str]] = {}
    for i in range(200):
        name = f"persistent://t/n/x{i}"
        by_bundle.setdefault(NamespaceBundles("t/n").find_bundle(name), []).append(name)
    owned = [bundles[0], bundles[-1]]  # the last one holds 0xffffffff too
    topics = [topic(n, 30) for names in by_bundle.values() for n in names] + [topic("persistent://t/other/y", 5)]
    stats = bundle_stats(topics, owned, NOW)
    assert set(stats) == {str(b) for b in owned}
    for bundle in owned:
        count = len(by_bundle[bundle])
        assert stats[str(bundle)].topics == count
        assert stats[str(bundle)].producer_count == count and stats[str(bundle)].consumer_count == count
        assert stats[str(bundle)].msg_rate_in == pytest.approx(count * 30 / 2)  # over the 2 s it has counted


def test_summing_by_slices_gives_the_same_totals() -> None:
    owned = NamespaceBundles("t/n").bundles
    topics = [topic(f"persistent://t/n/x{i}", i) for i in range(50)]
    totals = BundleTotals(owned)
    for start in range(0, 50, 7):
        totals.add(topics[start:start + 7], NOW)
    assert totals.stats() == bundle_stats(topics, owned, NOW)


def test_the_report_carries_the_bandwidth_against_the_nic_speed() -> None:
    owned = NamespaceBundles("t/n").bundles
    stats = bundle_stats([topic("persistent://t/n/a", 20)], owned, NOW)
    report = build_report(stats, ResourceUsage(50, 100), 1000.0, NOW)
    assert report.bandwidth_in == ResourceUsage(1000 / 1024, 1000.0)  # 10 msgs/s of 100 bytes, in KB/s
    assert report.cpu.percent_usage == 50 and report.last_update == NOW
    assert report.to_json()["numTopics"] == 1
