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
from magnetar.core.cluster.namespace_bundles import NamespaceBundle
from magnetar.core.names import TopicName
from magnetar.core.topics.topic import Topic


def topic_stats(topic: Topic, now_ms: int) -> BundleStats:
    rate_in, throughput_in = topic.msg_in.recent_rate(now_ms)
    rate_out = throughput_out = 0.0
    consumers = 0
    for sub in topic.subscriptions.values():
        for consumer in sub.consumers:
            rate, throughput = consumer.msg_out.recent_rate(now_ms)
            rate_out += rate
            throughput_out += throughput
            consumers += 1
    return BundleStats(rate_in, rate_out, throughput_in, throughput_out, consumers, len(topic.producers), 1)


def bundle_stats(topics: Iterable[Topic], owned: Iterable[NamespaceBundle], now_ms: int) -> dict[str, BundleStats]:
    """Each owned bundle's stats (``tenant/ns/range``), zero for a bundle without loaded topics."""
    owned_list = list(owned)
    stats = {str(bundle): BundleStats() for bundle in owned_list}
    by_namespace: dict[str, list[NamespaceBundle]] = {}
    for bundle in owned_list:
        by_namespace.setdefault(bundle.namespace, []).append(bundle)
    for topic in topics:
        name: TopicName = topic.name
        for bundle in by_namespace.get(name.namespace_name, ()):
            if bundle.includes(str(name)):
                stats[str(bundle)] = stats[str(bundle)] + topic_stats(topic, now_ms)
                break
    return stats


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
