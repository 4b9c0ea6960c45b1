"""What a broker measures of its own load, as a :class:`BrokerLoadReport`.

Per owned bundle, the traffic of its loaded topics (messages and bytes in, and out to their
consumers, over the part of the topics' rate windows they have counted, so that a topic just
taken over shows its rate in the next report), producers, consumers and topics; for the process,
its CPU time over the wall time since the last report (``limit`` 100: one core, the event
loop's), and the bandwidth in and out in KB/s against ``loadBalancerOverrideBrokerNicSpeedGbps``
(unknown, so weighing nothing, when it is not set).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from magnetar.core.cluster.load_report import BrokerLoadReport, BundleStats, ResourceUsage
from magnetar.core.cluster.namespace_bundles import FULL_UPPER_BOUND, NamespaceBundle, bundle_hash
from magnetar.core.topics.topic import Topic


class BundleTotals:
    """Each owned bundle's traffic, summed a slice of topics at a time (so that thousands of
    topics do not hold the event loop in one go)."""

    def __init__(self, owned: Iterable[NamespaceBundle]) -> None:
        #: namespace -> its owned bundles (lower, upper, name), for a lookup by hash
        self._ranges: dict[str, list[tuple[int, int, str]]] = {}
        #: bundle -> [rate in, rate out, throughput in, throughput out, consumers, producers, topics]
        self._sums: dict[str, list[float]] = {}
        for bundle in owned:
            self._ranges.setdefault(bundle.namespace, []).append((bundle.lower, bundle.upper, str(bundle)))
            self._sums[str(bundle)] = [0.0] * 7

    def add(self, topics: Iterable[Topic], now_ms: int) -> None:
        for topic in topics:
            name = topic.name
            ranges = self._ranges.get(name.namespace_name)
            if not ranges:
                continue
            hash_value = bundle_hash(str(name))
            bundle = next((key for lower, upper, key in ranges
                           if lower <= hash_value < upper or hash_value == upper == FULL_UPPER_BOUND), None)
            if bundle is None:
                continue
            sums = self._sums[bundle]
            rate_in, throughput_in = topic.msg_in.recent_rate(now_ms)
            sums[0] += rate_in
            sums[2] += throughput_in
            for sub in topic.subscriptions.values():
                for consumer in sub.consumers:
                    rate, throughput = consumer.msg_out.recent_rate(now_ms)
                    sums[1] += rate
                    sums[3] += throughput
                    sums[4] += 1
            sums[5] += len(topic.producers)
            sums[6] += 1

    def stats(self) -> dict[str, BundleStats]:
        return {bundle: BundleStats(s[0], s[1], s[2], s[3], int(s[4]), int(s[5]), int(s[6]))
                for bundle, s in self._sums.items()}


def bundle_stats(topics: Iterable[Topic], owned: Iterable[NamespaceBundle], now_ms: int) -> dict[str, BundleStats]:
    """Each owned bundle's stats (``tenant/ns/range``), zero for a bundle without loaded topics."""
    totals = BundleTotals(owned)
    totals.add(topics, now_ms)
    return totals.stats()


class CpuMeter:
    """The process's CPU usage between two readings, in percent of one core."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def usage(self) -> ResourceUsage:
        cpu, wall = time.process_time(), time.monotonic()
        elapsed = wall - self._wall
        percent = (cpu - self._cpu) / elapsed * 100 if elapsed > 0 else 0.0
        self._cpu, self._wall = cpu, wall
        return ResourceUsage(percent, 100.0)


def build_report(stats: Mapping[str, BundleStats], cpu: ResourceUsage, nic_speed_kbytes: float,
                 now_ms: int) -> BrokerLoadReport:
    total = BundleStats()
    for bundle in stats.values():
        total = total + bundle
    return BrokerLoadReport(cpu, ResourceUsage(total.msg_throughput_in / 1024, nic_speed_kbytes),
                            ResourceUsage(total.msg_throughput_out / 1024, nic_speed_kbytes), dict(stats), now_ms)
