"""Where the leader places a bundle nobody owns: Pulsar's ``LeastResourceUsageWithWeight`` idea.

With ``loadBalancerDistributeBundlesEvenlyEnabled`` (true), only the brokers owning the
fewest bundles of the bundle's namespace are considered (Pulsar's
``removeMostServicingBrokersForNamespace``), so a namespace spreads over the brokers. Among
them, each broker's load is its largest weighted resource usage (its last report, smoothed by
the leader). The best candidates are the brokers at least
``loadBalancerAverageResourceUsageDifferenceThresholdPercentage`` (10) points below the
average; when none is (every broker near the average), every broker is a candidate, except
those at or above ``loadBalancerBrokerOverloadedThresholdPercentage`` (85) while others are
below it. Pulsar picks a candidate at random; here the choice is deterministic (the
candidate owning the fewest bundles, counting those placed since its last report, then the
least used, then the smallest id), so that bundles placed between two reports spread over
the candidates instead of piling on one, and the same inputs always give the same broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """What placement knows of one broker: its load (1.0 is 100 %), its bundles and those of
    the bundle's namespace (owned, plus those placed on it since its last report)."""

    usage: float
    bundles: int
    namespace_bundles: int = 0


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    difference_threshold_percentage: float = 10.0
    overloaded_threshold_percentage: float = 85.0
    distribute_bundles_evenly: bool = True


def best_candidates(loads: Mapping[str, BrokerLoad], config: PlacementConfig = PlacementConfig()) -> list[str]:
    """The brokers a new bundle may go to, sorted by id; empty only when ``loads`` is."""
    if not loads:
        return []
    if config.distribute_bundles_evenly:
        fewest = min(load.namespace_bundles for load in loads.values())
        loads = {broker: load for broker, load in loads.items() if load.namespace_bundles == fewest}
    average = sum(load.usage for load in loads.values()) / len(loads)
    threshold = config.difference_threshold_percentage / 100
    best = [broker for broker, load in loads.items() if load.usage + threshold <= average]
    if not best:
        limit = config.overloaded_threshold_percentage / 100
        best = [broker for broker, load in loads.items() if load.usage < limit] or list(loads)
    return sorted(best)


def select_least_loaded(loads: Mapping[str, BrokerLoad], config: PlacementConfig = PlacementConfig()) -> str | None:
    """The broker for a new bundle, ``None`` when no broker is registered."""
    candidates = best_candidates(loads, config)
    if not candidates:
        return None
    return min(candidates, key=lambda broker: (loads[broker].namespace_bundles, loads[broker].bundles,
                                               loads[broker].usage, broker))
