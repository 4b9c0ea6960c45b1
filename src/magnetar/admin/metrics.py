"""``/metrics``: Prometheus text with Pulsar's metric names and labels, read from live state.

Topic-level series carry ``cluster``, ``namespace`` and ``topic`` labels; subscription
series add ``subscription``; consumer series (``exposeConsumerLevelMetricsInPrometheus``)
add ``consumer_name`` and ``consumer_id``. With ``exposeTopicLevelMetricsInPrometheus=false``
the topic series are summed per namespace (no ``topic`` label) and subscription and
consumer series are left out, as Pulsar does. Latency series follow Pulsar's
``pulsar_storage_write_latency_le_*`` bucket gauges (cumulative counts here, so
``rate()`` works) and its ``pulsar_broker_publish_latency`` summary (seconds).
Process and Python runtime metrics come from prometheus-client's collectors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from magnetar.admin.delayed_metrics import delayed_index_families
from magnetar.admin.stats import (
    DELAYED_DELIVERY_STATS,
    backlog_size_bytes,
    extra_consumer_stats,
    extra_subscription_stats,
)
from magnetar.server.broker_stats import LATENCY_BUCKET_NAMES, LatencyBuckets
from magnetar.server.clock import now_ms

if TYPE_CHECKING:
    from magnetar.core.subscription import Subscription
    from magnetar.core.topic import Topic
    from magnetar.server.broker import BrokerOperations

TOPIC_GAUGES = {
    "pulsar_subscriptions_count": "Number of subscriptions",
    "pulsar_producers_count": "Number of producers",
    "pulsar_consumers_count": "Number of consumers",
    "pulsar_rate_in": "Messages published per second",
    "pulsar_rate_out": "Messages dispatched per second",
    "pulsar_throughput_in": "Bytes published per second",
    "pulsar_throughput_out": "Bytes dispatched per second",
    "pulsar_storage_size": "Bytes stored",
    "pulsar_storage_logical_size": "Bytes stored, before replication",
    "pulsar_storage_backlog_size": "Estimated bytes of unacknowledged backlog",
    "pulsar_msg_backlog": "Entries not yet acknowledged, over all subscriptions",
    "pulsar_storage_write_rate": "Entries written per second",
    "pulsar_delayed_message_index_size_bytes": "Memory of the delayed delivery indexes",
}
TOPIC_COUNTERS = {
    "pulsar_in_bytes_total": "Bytes published",
    "pulsar_in_messages_total": "Messages published",
    "pulsar_out_bytes_total": "Bytes dispatched",
    "pulsar_out_messages_total": "Messages dispatched",
}
SUBSCRIPTION_GAUGES = {
    "pulsar_subscription_back_log": "Entries not yet acknowledged",
    "pulsar_subscription_back_log_no_delayed": "Backlog without delayed messages",
    "pulsar_subscription_delayed": "Delayed messages tracked",
    "pulsar_subscription_msg_rate_out": "Messages dispatched per second",
    "pulsar_subscription_msg_throughput_out": "Bytes dispatched per second",
    "pulsar_subscription_msg_rate_redeliver": "Messages redelivered per second",
    "pulsar_subscription_msg_ack_rate": "Acknowledgements per second",
    "pulsar_subscription_unacked_messages": "Messages delivered and not acknowledged",
    "pulsar_subscription_blocked_on_unacked_messages": "1 when dispatch is blocked on unacked messages",
    "pulsar_subscription_consumers_count": "Number of consumers",
    "pulsar_subscription_msg_rate_expired": "Messages expired per second",
    "pulsar_subscription_total_msg_expired": "Messages expired",
    "pulsar_subscription_last_expire_timestamp": "Last expiry (ms since epoch)",
    "pulsar_subscription_draining_hashes_count": "Key_Shared: hashes draining at the subscription's consumers",
    "pulsar_subscription_draining_hashes_unacked_messages": "Key_Shared: unacked messages of draining hashes",
}
SUBSCRIPTION_COUNTERS = {
    "pulsar_subscription_draining_hashes_cleared_total": "Key_Shared: hashes cleared from draining",
}
#: Key_Shared draining-hash stats fields and the metric suffix each one feeds
DRAINING_FIELDS = {
    "draining_hashes_count": "drainingHashesCount",
    "draining_hashes_unacked_messages": "drainingHashesUnackedMessages",
    "draining_hashes_cleared_total": "drainingHashesClearedTotal",
}
CONSUMER_GAUGES = {
    "pulsar_consumer_msg_rate_out": "Messages dispatched per second",
    "pulsar_consumer_msg_throughput_out": "Bytes dispatched per second",
    "pulsar_consumer_msg_rate_redeliver": "Messages redelivered per second",
    "pulsar_consumer_msg_ack_rate": "Acknowledgements per second",
    "pulsar_consumer_unacked_messages": "Messages delivered and not acknowledged",
    "pulsar_consumer_blocked_on_unacked_messages": "1 when blocked on unacked messages",
    "pulsar_consumer_available_permits": "Permits the consumer granted",
    "pulsar_consumer_draining_hashes_count": "Key_Shared: hashes draining at the consumer",
    "pulsar_consumer_draining_hashes_unacked_messages": "Key_Shared: unacked messages of its draining hashes",
}
CONSUMER_COUNTERS = {
    "pulsar_consumer_draining_hashes_cleared_total": "Key_Shared: hashes cleared from draining at the consumer",
}


def _draining_values(prefix: str, stats: dict[str, Any]) -> dict[str, float]:
    return {f"{prefix}_{suffix}": float(stats.get(field) or 0) for suffix, field in DRAINING_FIELDS.items()}
LATENCY_SERIES = {
    "pulsar_storage_write_latency": "Publish latency: append to durable (ms)",
    "pulsar_storage_ledger_write_latency": "fsync latency of the group commit (ms)",
}


def _topic_values(topic: Topic, now: int) -> dict[str, float]:
    rate_in, throughput_in = topic.msg_in.rate(now)
    values = dict.fromkeys(TOPIC_GAUGES, 0.0) | dict.fromkeys(TOPIC_COUNTERS, 0.0)
    slowest = topic.slowest_mark_delete()
    values.update({
        "pulsar_subscriptions_count": len(topic.subscriptions),
        "pulsar_producers_count": len(topic.producers),
        "pulsar_rate_in": rate_in,
        "pulsar_throughput_in": throughput_in,
        "pulsar_storage_size": topic.ledger.total_size_bytes(),
        "pulsar_storage_logical_size": topic.ledger.total_size_bytes(),
        "pulsar_storage_backlog_size": backlog_size_bytes(topic, slowest) if slowest is not None else 0,
        "pulsar_storage_write_rate": rate_in * topic.msg_in.total_events / topic.msg_in.total_msgs
        if topic.msg_in.total_msgs else 0.0,
        "pulsar_in_bytes_total": topic.msg_in.total_bytes,
        "pulsar_in_messages_total": topic.msg_in.total_msgs,
    })
    for sub in topic.subscriptions.values():
        values["pulsar_consumers_count"] += len(sub.consumers)
        values["pulsar_msg_backlog"] += sub.backlog()
        values["pulsar_delayed_message_index_size_bytes"] += DELAYED_DELIVERY_STATS(sub).index_size_bytes
        for consumer in sub.consumers:
            rate, throughput = consumer.msg_out.rate(now)
            values["pulsar_rate_out"] += rate
            values["pulsar_throughput_out"] += throughput
            values["pulsar_out_bytes_total"] += consumer.msg_out.total_bytes
            values["pulsar_out_messages_total"] += consumer.msg_out.total_msgs
    return values


def _subscription_values(broker: BrokerOperations, sub: Subscription, now: int) -> dict[str, float]:
    backlog = sub.backlog()
    delayed = DELAYED_DELIVERY_STATS(sub).messages
    expiry = broker.recorder.expiry.get((str(sub.topic.name), sub.name))
    consumers = sub.consumers
    return {
        "pulsar_subscription_back_log": backlog,
        "pulsar_subscription_back_log_no_delayed": max(0, backlog - delayed),
        "pulsar_subscription_delayed": delayed,
        "pulsar_subscription_msg_rate_out": sum(c.msg_out.rate(now)[0] for c in consumers),
        "pulsar_subscription_msg_throughput_out": sum(c.msg_out.rate(now)[1] for c in consumers),
        "pulsar_subscription_msg_rate_redeliver": sum(c.redeliver.rate(now)[0] for c in consumers),
        "pulsar_subscription_msg_ack_rate": sum(c.acks.rate(now)[0] for c in consumers),
        "pulsar_subscription_unacked_messages": sub.unacked_messages(),
        "pulsar_subscription_blocked_on_unacked_messages":
            1.0 if getattr(sub.dispatcher, "blocked_on_unacked", False) else 0.0,
        "pulsar_subscription_consumers_count": len(consumers),
        "pulsar_subscription_msg_rate_expired": expiry.expired.rate(now)[0] if expiry else 0.0,
        "pulsar_subscription_total_msg_expired": expiry.expired.total_msgs if expiry else 0,
        "pulsar_subscription_last_expire_timestamp": expiry.last_expire_ms if expiry else 0,
        **_draining_values("pulsar_subscription", extra_subscription_stats(sub)),
    }


class BrokerCollector:
    """Builds every Pulsar series from the broker's live topics at scrape time."""

    def __init__(self, broker: BrokerOperations) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        config = self.broker.config
        by_topic = config.exposeTopicLevelMetricsInPrometheus
        labels = ["cluster", "namespace", "topic"] if by_topic else ["cluster", "namespace"]
        now = now_ms()
        topics = sorted(self.broker.topics.values(), key=lambda t: str(t.name))
        yield from self._topic_counts(topics)
        rows = self._topic_rows(topics, by_topic, now)
        yield from self._families(TOPIC_GAUGES, TOPIC_COUNTERS, labels, rows)
        yield from self._latency(topics, labels, by_topic)
        if by_topic:
            yield from self._subscriptions(topics, now)
            if config.exposeConsumerLevelMetricsInPrometheus:
                yield from self._consumers(topics, now)
        yield from delayed_index_families(config.clusterName, topics, by_topic)
        yield self._publish_latency()
        yield from self._disk()

    def _disk(self) -> Iterator[Metric]:
        """Magnetar's own series (no Pulsar name exists): the data disk's usage and whether
        appends are refused for it (``diskUsageThreshold``)."""
        cluster = [self.broker.config.clusterName]
        usage = GaugeMetricFamily("magnetar_disk_usage_ratio", "Share of the data disk in use", labels=["cluster"])
        usage.add_metric(cluster, self.broker.disk.ratio)
        refused = GaugeMetricFamily("magnetar_disk_appends_refused",
                                    "1 while appends are refused for disk usage above diskUsageThreshold",
                                    labels=["cluster"])
        refused.add_metric(cluster, 1.0 if self.broker.disk.refusing else 0.0)
        yield usage
        yield refused

    def _key(self, topic: Topic, by_topic: bool) -> tuple[str, ...]:
        base = (self.broker.config.clusterName, topic.name.namespace_name)
        return (*base, str(topic.name)) if by_topic else base

    def _topic_counts(self, topics: list[Topic]) -> Iterator[Metric]:
        family = GaugeMetricFamily("pulsar_topics_count", "Number of topics", labels=["cluster", "namespace"])
        counts: dict[str, int] = defaultdict(int)
        for topic in topics:
            counts[topic.name.namespace_name] += 1
        for namespace, count in sorted(counts.items()):
            family.add_metric([self.broker.config.clusterName, namespace], count)
        yield family

    def _topic_rows(self, topics: list[Topic], by_topic: bool,
                    now: int) -> dict[tuple[str, ...], dict[str, float]]:
        rows: dict[tuple[str, ...], dict[str, float]] = {}
        for topic in topics:
            values = _topic_values(topic, now)
            row = rows.setdefault(self._key(topic, by_topic), dict.fromkeys(values, 0.0))
            for name, value in values.items():
                row[name] += value
        return rows

    @staticmethod
    def _families(gauges: dict[str, str], counters: dict[str, str], labels: list[str],
                  rows: dict[tuple[str, ...], dict[str, float]]) -> Iterator[Metric]:
        for name, doc in gauges.items():
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            for key, values in rows.items():
                gauge.add_metric(list(key), values[name])
            yield gauge
        for name, doc in counters.items():
            counter = CounterMetricFamily(name, doc, labels=labels)
            for key, values in rows.items():
                counter.add_metric(list(key), values[name])
            yield counter

    def _latency(self, topics: list[Topic], labels: list[str], by_topic: bool) -> Iterator[Metric]:
        recorder = self.broker.recorder
        sources = {"pulsar_storage_write_latency": recorder.write_latency,
                   "pulsar_storage_ledger_write_latency": recorder.ledger_write_latency()}
        for base, doc in LATENCY_SERIES.items():
            merged: dict[tuple[str, ...], LatencyBuckets] = {}
            for topic in topics:
                buckets = sources[base].get(topic.ledger.name)
                if buckets is None:
                    continue
                total = merged.setdefault(self._key(topic, by_topic), LatencyBuckets())
                total.counts = [a + b for a, b in zip(total.counts, buckets.counts, strict=True)]
                total.count += buckets.count
                total.sum_ms += buckets.sum_ms
            yield from self._latency_families(base, doc, labels, merged)

    @staticmethod
    def _latency_families(base: str, doc: str, labels: list[str],
                          merged: dict[tuple[str, ...], LatencyBuckets]) -> Iterator[Metric]:
        for index, suffix in enumerate(LATENCY_BUCKET_NAMES):
            family = GaugeMetricFamily(f"{base}_le_{suffix}", f"{doc}, bucket le {suffix}", labels=labels)
            for key, buckets in merged.items():
                family.add_metric(list(key), buckets.counts[index])
            yield family
        count = GaugeMetricFamily(f"{base}_count", f"{doc}, count", labels=labels)
        total = GaugeMetricFamily(f"{base}_sum", f"{doc}, sum", labels=labels)
        for key, buckets in merged.items():
            count.add_metric(list(key), buckets.count)
            total.add_metric(list(key), buckets.sum_ms)
        yield count
        yield total

    def _subscriptions(self, topics: list[Topic], now: int) -> Iterator[Metric]:
        labels = ["cluster", "namespace", "topic", "subscription"]
        rows: dict[tuple[str, ...], dict[str, float]] = {}
        for topic in topics:
            for name, sub in sorted(topic.subscriptions.items()):
                rows[(*self._key(topic, True), name)] = _subscription_values(self.broker, sub, now)
        yield from self._families(SUBSCRIPTION_GAUGES, SUBSCRIPTION_COUNTERS, labels, rows)

    def _consumers(self, topics: list[Topic], now: int) -> Iterator[Metric]:
        labels = ["cluster", "namespace", "topic", "subscription", "consumer_name", "consumer_id"]
        rows: dict[tuple[str, ...], dict[str, float]] = {}
        for topic in topics:
            for name, sub in sorted(topic.subscriptions.items()):
                for c in sub.consumers:
                    rate, throughput = c.msg_out.rate(now)
                    rows[(*self._key(topic, True), name, c.consumer_name, str(c.consumer_id))] = {
                        "pulsar_consumer_msg_rate_out": rate,
                        "pulsar_consumer_msg_throughput_out": throughput,
                        "pulsar_consumer_msg_rate_redeliver": c.redeliver.rate(now)[0],
                        "pulsar_consumer_msg_ack_rate": c.acks.rate(now)[0],
                        "pulsar_consumer_unacked_messages": c.unacked_messages,
                        "pulsar_consumer_blocked_on_unacked_messages": 1.0 if c.blocked_on_unacked else 0.0,
                        "pulsar_consumer_available_permits": max(0, c.permits),
                        **_draining_values("pulsar_consumer", extra_consumer_stats(sub, c)),
                    }
        yield from self._families(CONSUMER_GAUGES, CONSUMER_COUNTERS, labels, rows)

    def _publish_latency(self) -> Metric:
        latency = self.broker.recorder.publish_latency
        name = "pulsar_broker_publish_latency"
        metric = Metric(name, "Publish latency from append to durable (seconds)", "summary")
        cluster = self.broker.config.clusterName
        for quantile, value in latency.quantiles():
            metric.add_sample(name, {"cluster": cluster, "quantile": str(quantile)}, value)
        metric.add_sample(f"{name}_count", {"cluster": cluster}, latency.count)
        metric.add_sample(f"{name}_sum", {"cluster": cluster}, latency.sum_s)
        return metric


def render_metrics(broker: BrokerOperations) -> tuple[bytes, str]:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(BrokerCollector(broker))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST
