"""Bundle splits: which bundles the leader splits, and where a bundle is cut.

Pulsar's ``BundleSplitterTask``: with ``loadBalancerAutoBundleSplitEnabled``, a bundle of at
least two topics is split when it has more than ``loadBalancerNamespaceBundleMaxTopics``
(1000) topics, more than ``loadBalancerNamespaceBundleMaxSessions`` (1000) producers and
consumers (a value of 0 or less: no limit), more than
``loadBalancerNamespaceBundleMaxMsgRate`` (30000) messages in and out per second, or more
than ``loadBalancerNamespaceBundleMaxBandwidthMbytes`` (100) MB in and out per second, as
long as its namespace stays within ``loadBalancerNamespaceMaximumBundles`` (128) bundles;
at most ``loadBalancerMaxNumberOfBundlesToSplitPerCycle`` (10) bundles a cycle.

Where it is cut is Pulsar's split algorithm: ``range_equally_divide`` (the middle of the
range, the default) or ``topic_count_equally_divide`` (between the two middle topic hashes
of the bundle, so each half holds as many topics as the other).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from magnetar.core.cluster.load_report import MEGABYTE, BundleStats
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle, NamespaceBundles

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
#: the algorithms a split may name (Pulsar's ``supportedNamespaceBundleSplitAlgorithms`` that apply here)
SPLIT_ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE)


class SplitRefused(Exception):
    """The split cannot be made now (a half is owned already): try again."""


@dataclass(frozen=True, slots=True)
class SplitConfig:
    enabled: bool = True
    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate: float = 30000
    max_bandwidth_mbytes: float = 100
    max_bundles: int = 128
    max_per_cycle: int = 10


@dataclass(frozen=True, slots=True)
class SplitDecision:
    #: ``tenant/ns/0x..._0x...``
    bundle: str
    reason: str


def find_bundles_to_split(stats: Mapping[str, BundleStats], bundle_counts: Mapping[str, int],
                          config: SplitConfig = SplitConfig()) -> list[SplitDecision]:
    """The bundles to split this cycle, from each bundle's stats (by ``tenant/ns/range``)
    and the number of bundles of each namespace (``tenant/ns``)."""
    if not config.enabled:
        return []
    counts = dict(bundle_counts)
    decisions: list[SplitDecision] = []
    for bundle in sorted(stats):
        if len(decisions) >= config.max_per_cycle:
            break
        reason = split_reason(stats[bundle], config)
        namespace = bundle.rsplit("/", 1)[0]
        if reason is None or counts.get(namespace, 1) >= config.max_bundles:
            continue
        counts[namespace] = counts.get(namespace, 1) + 1
        decisions.append(SplitDecision(bundle, reason))
    return decisions


def split_reason(stats: BundleStats, config: SplitConfig) -> str | None:
    """Why a bundle with these stats is split, ``None`` when it is not."""
    if stats.topics < 2:
        return None
    if stats.topics > config.max_topics:
        return f"{stats.topics} topics > loadBalancerNamespaceBundleMaxTopics {config.max_topics}"
    if 0 < config.max_sessions < stats.sessions:
        return f"{stats.sessions} sessions > loadBalancerNamespaceBundleMaxSessions {config.max_sessions}"
    if stats.msg_rate > config.max_msg_rate:
        return f"{stats.msg_rate:.0f} msgs/s > loadBalancerNamespaceBundleMaxMsgRate {config.max_msg_rate:g}"
    if stats.msg_throughput > config.max_bandwidth_mbytes * MEGABYTE:
        return (f"{stats.msg_throughput / MEGABYTE:.1f} MB/s > loadBalancerNamespaceBundleMaxBandwidthMbytes "
                f"{config.max_bandwidth_mbytes:g}")
    return None


def split_boundary(bundle: NamespaceBundle, algorithm: str, topic_hashes: Sequence[int] = ()) -> int:
    """Where ``bundle`` is cut; :class:`InvalidBundle` when the algorithm is unknown or the
    bundle cannot be cut by it."""
    if algorithm == RANGE_EQUALLY_DIVIDE:
        if bundle.upper - bundle.lower < 2:
            raise InvalidBundle(f"{bundle} cannot be split further")
        return bundle.lower + (bundle.upper - bundle.lower) // 2
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        hashes = sorted({h for h in topic_hashes if bundle.includes_hash(h)})
        if len(hashes) < 2:
            raise InvalidBundle(f"{bundle} holds {len(hashes)} topic: {algorithm} needs two")
        middle = len(hashes) // 2
        boundary = hashes[middle - 1] + (hashes[middle] - hashes[middle - 1] + 1) // 2
        return max(min(boundary, bundle.upper - 1), bundle.lower + 1)
    raise InvalidBundle(f"Unsupported namespace bundle split algorithm {algorithm!r}: one of "
                        f"{', '.join(SPLIT_ALGORITHMS)}")


def split_bundle(bundles: NamespaceBundles, bundle: NamespaceBundle, algorithm: str = RANGE_EQUALLY_DIVIDE,
                 topic_hashes: Sequence[int] = ()) -> NamespaceBundles:
    """The namespace's bundles with ``bundle`` replaced by its two halves."""
    if bundle not in bundles.bundles:
        raise InvalidBundle(f"{bundle} is not a bundle of {bundles.namespace}")
    boundary = split_boundary(bundle, algorithm, topic_hashes)
    return NamespaceBundles(bundles.namespace, sorted((*bundles.boundaries, boundary)))
