"""The load manager on ``/metrics``, with Pulsar's names and labels: ``pulsar_lb_cpu_usage``,
``pulsar_lb_bandwidth_in_usage``, ``pulsar_lb_bandwidth_out_usage`` (percent, labels
``cluster``, ``broker``, ``metric="loadBalancing"``), ``pulsar_lb_unload_broker_total`` and
``pulsar_lb_unload_bundle_total`` (``metric="bundleUnloading"``), ``pulsar_lb_bundles_split_total``
(``metric="bundlesSplit"``): gauges, as Pulsar exports them. A standalone broker has none."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from magnetar.core.broker.broker_facade import TopicOwners

USAGES = (("pulsar_lb_cpu_usage", "cpu", "The broker's CPU usage (percent of one core)"),
          ("pulsar_lb_bandwidth_in_usage", "bandwidthIn", "The broker's inbound bandwidth usage (percent)"),
          ("pulsar_lb_bandwidth_out_usage", "bandwidthOut", "The broker's outbound bandwidth usage (percent)"))
DECISIONS = (("pulsar_lb_unload_broker_total", "unload_broker", "bundleUnloading",
              "Brokers the leader unloaded bundles from"),
             ("pulsar_lb_unload_bundle_total", "unload_bundle", "bundleUnloading", "Bundles the leader unloaded"),
             ("pulsar_lb_bundles_split_total", "bundles_split", "bundlesSplit", "Bundles the leader split"))


def load_balancing_families(owners: TopicOwners | None, cluster: str) -> list[Metric]:
    balancing = None if owners is None else owners.load_balancing
    if owners is None or balancing is None:
        return []
    report = balancing.load_report()
    families: list[Metric] = []
    for name, key, text in USAGES:
        family = GaugeMetricFamily(name, text, labels=["cluster", "broker", "metric"])
        family.add_metric([cluster, owners.broker_id, "loadBalancing"], _percent(report.get(key)))
        families.append(family)
    counts = balancing.decision_counts()
    for name, key, metric, text in DECISIONS:
        family = GaugeMetricFamily(name, text, labels=["cluster", "metric"])
        family.add_metric([cluster, metric], counts.get(key, 0))
        families.append(family)
    return families


def _percent(usage: Any) -> float:
    if not isinstance(usage, dict) or not usage.get("limit"):
        return 0.0
    return float(usage.get("usage") or 0) / float(usage["limit"]) * 100
