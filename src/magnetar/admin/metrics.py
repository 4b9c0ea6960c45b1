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

import asyncio
import logging
import operator
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from magnetar.admin.delayed_metrics import DelayedIndexRows
from magnetar.admin.metrics_text import (
    SAMPLES_PER_SLICE,
    TOPIC_COUNTERS,
    TOPIC_GAUGES,
    ScrapeRows,
    rows_text,
)
from magnetar.admin.metrics_worker import text_elsewhere
from magnetar.admin.stats import (
    DELAYED_DELIVERY_STATS,
    extra_consumer_stats,
    extra_subscription_stats,
)
from magnetar.core.backlog import oldest_backlog, topic_backlog_bytes
from magnetar.core.backlog_quota import BacklogQuotas
from magnetar.server import topic_lifecycle
from magnetar.server.broker_stats import LatencyValues
from magnetar.server.clock import now_ms
from magnetar.server.thread_switching import faster_thread_switching

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from magnetar.core.consumer import Consumer
    from magnetar.core.subscription import Subscription
    from magnetar.core.topic import Topic
    from magnetar.server.broker import BrokerOperations

#: Key_Shared draining-hash stats fields and the metric suffix each one feeds
DRAINING_FIELDS = {
    "draining_hashes_count": "drainingHashesCount",
    "draining_hashes_unacked_messages": "drainingHashesUnackedMessages",
    "draining_hashes_cleared_total": "drainingHashesClearedTotal",
}


def _draining_values(prefix: str, stats: dict[str, Any]) -> dict[str, float]:
    return {f"{prefix}_{suffix}": float(stats.get(field) or 0) for suffix, field in DRAINING_FIELDS.items()}

def _topic_values(topic: Topic, quotas: BacklogQuotas, now: int) -> dict[str, float]:
    rate_in, throughput_in = topic.msg_in.rate(now)
    values = dict.fromkeys(TOPIC_GAUGES, 0.0) | dict.fromkeys(TOPIC_COUNTERS, 0.0)
    oldest = oldest_backlog(topic)
    values.update({
        "pulsar_storage_backlog_quota_limit": quotas.size.limit,
        "pulsar_storage_backlog_quota_limit_time": quotas.time.limit,
        "pulsar_storage_backlog_age_seconds": oldest.age_s(now) if oldest is not None else 0,
        "pulsar_subscriptions_count": len(topic.subscriptions),
        "pulsar_producers_count": len(topic.producers),
        "pulsar_rate_in": rate_in,
        "pulsar_throughput_in": throughput_in,
        "pulsar_storage_size": topic.ledger.total_size_bytes(),
        "pulsar_storage_logical_size": topic.ledger.total_size_bytes(),
        "pulsar_storage_backlog_size": topic_backlog_bytes(topic),
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
            1.0 if sub.dispatcher.blocked_on_unacked else 0.0,
        "pulsar_subscription_consumers_count": len(consumers),
        "pulsar_subscription_msg_rate_expired": sub.expired.rate(now)[0],
        "pulsar_subscription_total_msg_expired": sub.expired.total_msgs,
        "pulsar_subscription_last_expire_timestamp": sub.expired.last_ms,
        **_draining_values("pulsar_subscription", extra_subscription_stats(sub)),
    }


#: topics read per slice of a scrape; the event loop serves other work between slices. A
#: slice is about half a millisecond; another client's publish waits for about two of them
#: (its SEND, then its receipt), so shorter slices are lower latencies during a scrape:
#: at 10,000 topics, publish p50 4.3 ms and p99 8 ms with 20 topics and 400 samples per
#: slice, 1.6 ms and 3.5 to 4.3 ms with 5 and 200 (``bench/metrics_bench.py``)
TOPICS_PER_SLICE = 5

@dataclass
class MetricsSnapshot(ScrapeRows):
    """Every value a scrape reports, copied from live state on the event loop a slice of
    topics at a time; turning the rows into text is :mod:`magnetar.admin.metrics_text`'s."""

    delayed: DelayedIndexRows = field(default_factory=DelayedIndexRows)
    extra: list[Metric] = field(default_factory=list)

    def key(self, topic: Topic, by_topic: bool) -> tuple[str, ...]:
        base = (self.cluster, topic.name.namespace_name)
        return (*base, str(topic.name)) if by_topic else base


async def take_snapshot(broker: BrokerOperations) -> MetricsSnapshot:
    config = broker.config
    snap = MetricsSnapshot(config.clusterName, config.exposeTopicLevelMetricsInPrometheus,
                           config.exposeConsumerLevelMetricsInPrometheus)
    topics = list(broker.topics.values())
    recorder = broker.recorder
    sources: dict[str, Callable[[str], LatencyValues | None]] = {
               "pulsar_storage_write_latency": recorder.write_latency_of,
               "pulsar_storage_ledger_write_latency": recorder.ledger_write_latency_of}
    for first in range(0, len(topics), TOPICS_PER_SLICE):
        now = now_ms()
        for topic in topics[first:first + TOPICS_PER_SLICE]:
            if broker.topics.get(str(topic.name)) is not topic:
                continue  # unloaded or deleted since the scrape began
            _add_topic(snap, broker, topic, sources, now)
        await asyncio.sleep(0)
    snap.extra = [_publish_latency(broker), *_disk(broker)]
    return snap


def _add_topic(snap: MetricsSnapshot, broker: BrokerOperations, topic: Topic,
               sources: dict[str, Callable[[str], LatencyValues | None]], now: int) -> None:
    snap.topic_counts[topic.name.namespace_name] += 1
    values = _topic_values(topic, topic_lifecycle.backlog_quotas_of(broker, topic), now)
    for kind, count in topic.quota_evictions.items():
        snap.evictions[(*snap.key(topic, snap.by_topic), kind)] += count
    row = snap.topic_rows.setdefault(snap.key(topic, snap.by_topic), dict.fromkeys(values, 0.0))
    for name, value in values.items():
        row[name] += value
    for base, source in sources.items():
        latency = source(topic.ledger.name)
        if latency is not None:
            merged, key = snap.latency[base], snap.key(topic, snap.by_topic)
            total = merged.get(key)
            merged[key] = latency if total is None else tuple(map(operator.add, total, latency))
    if snap.by_topic:
        for name, sub in sorted(topic.subscriptions.items()):
            snap.subscription_rows[(*snap.key(topic, True), name)] = _subscription_values(broker, sub, now)
            if snap.with_consumers:
                for c in sub.consumers:
                    snap.consumer_rows[(*snap.key(topic, True), name, c.consumer_name, str(c.consumer_id))] = \
                        _consumer_values(sub, c, now)
    snap.delayed.add_topic(snap.cluster, topic, snap.by_topic)


def _consumer_values(sub: Subscription, c: Consumer, now: int) -> dict[str, float]:
    rate, throughput = c.msg_out.rate(now)
    return {
        "pulsar_consumer_msg_rate_out": rate,
        "pulsar_consumer_msg_throughput_out": throughput,
        "pulsar_consumer_msg_rate_redeliver": c.redeliver.rate(now)[0],
        "pulsar_consumer_msg_ack_rate": c.acks.rate(now)[0],
        "pulsar_consumer_unacked_messages": c.unacked_messages,
        "pulsar_consumer_blocked_on_unacked_messages": 1.0 if c.blocked_on_unacked else 0.0,
        "pulsar_consumer_available_permits": max(0, c.permits),
        **_draining_values("pulsar_consumer", extra_consumer_stats(sub, c)),
    }


def _publish_latency(broker: BrokerOperations) -> Metric:
    latency = broker.recorder.publish_latency
    name = "pulsar_broker_publish_latency"
    metric = Metric(name, "Publish latency from append to durable (seconds)", "summary")
    cluster = broker.config.clusterName
    for quantile, value in latency.quantiles():
        metric.add_sample(name, {"cluster": cluster, "quantile": str(quantile)}, value)
    metric.add_sample(f"{name}_count", {"cluster": cluster}, latency.count)
    metric.add_sample(f"{name}_sum", {"cluster": cluster}, latency.sum_s)
    return metric


def _disk(broker: BrokerOperations) -> list[Metric]:
    """Magnetar's own series (no Pulsar name exists): the data disk's usage and whether
    appends are refused for it (``diskUsageThreshold``)."""
    cluster = [broker.config.clusterName]
    usage = GaugeMetricFamily("magnetar_disk_usage_ratio", "Share of the data disk in use", labels=["cluster"])
    usage.add_metric(cluster, broker.disk.ratio)
    refused = GaugeMetricFamily("magnetar_disk_appends_refused",
                                "1 while appends are refused for disk usage above diskUsageThreshold",
                                labels=["cluster"])
    refused.add_metric(cluster, 1.0 if broker.disk.refusing else 0.0)
    return [usage, refused]



class _One:
    """One family as a collector, for prometheus-client's formatter."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def _process_text() -> bytes:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return generate_latest(registry)


async def metrics_text(broker: BrokerOperations) -> AsyncIterator[bytes]:
    """The scrape, streamed: values read on the event loop a slice of topics at a time,
    then made into text by a child process (:mod:`magnetar.admin.metrics_worker`) while
    the loop passes the text on; if no child can be started, made on the loop a slice of
    samples at a time. The loop yields between slices, so a scrape of many topics does
    not hold up publishing (a worker thread would, through the interpreter lock)."""
    with faster_thread_switching():  # the committer thread is not kept waiting meanwhile
        yield _process_text()
        snap = await take_snapshot(broker)
        async for chunk in _rows_text(snap):
            yield chunk
        for metric in [*snap.delayed.families(), *snap.extra]:
            yield generate_latest(_One(metric))  # type: ignore[arg-type]
        for rows in snap.tables().values():
            await release(rows)


async def _rows_text(snap: MetricsSnapshot) -> AsyncIterator[bytes]:
    sent = False
    try:
        async for chunk in text_elsewhere(snap):
            sent = True
            yield chunk
        return
    except (OSError, RuntimeError) as exc:  # no child, or it failed before it wrote anything
        if sent:
            raise
        log.warning("metrics text made on the event loop: no worker process (%s)", exc)
    for chunk in rows_text(snap):
        yield chunk
        await asyncio.sleep(0)


async def release(rows: dict[Any, Any]) -> None:
    """Free a scrape's rows a slice at a time: freeing a row per topic at once, when the
    snapshot goes, holds the event loop as long as building them did (the latency and
    eviction rows left to go with the snapshot held it 47 to 55 ms at 50,000 topics)."""
    while rows:
        for _ in range(min(len(rows), SAMPLES_PER_SLICE)):
            rows.popitem()
        await asyncio.sleep(0)

