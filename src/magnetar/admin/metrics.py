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

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from magnetar.admin.delayed_metrics import DelayedIndexRows
from magnetar.admin.load_balancing_metrics import load_balancing_families
from magnetar.admin.loop_lag_metrics import loop_lag_families
from magnetar.admin.metrics_text import (
    CONSUMER_COLUMNS,
    SUBSCRIPTION_COLUMNS,
    TOPIC_COLUMNS,
    ScrapeRows,
    add_to,
    rows_text,
)
from magnetar.admin.metrics_worker import NoWorker, text_elsewhere
from magnetar.admin.scrape_pacing import Activity, ScrapePacer
from magnetar.admin.scrape_socket import ScrapeSocket
from magnetar.admin.stats import (
    DELAYED_DELIVERY_STATS,
    DelayedStats,
    extra_consumer_stats,
    extra_subscription_stats,
)
from magnetar.core.policies import lifecycle_checks
from magnetar.core.policies.backlog_quota import BacklogQuotas
from magnetar.core.stats import LatencyValues
from magnetar.core.topics.backlog import oldest_backlog, topic_backlog_bytes

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from magnetar.admin.admin_broker import AdminBroker
    from magnetar.core.subscriptions.consumer import Consumer
    from magnetar.core.subscriptions.subscription import Subscription
    from magnetar.core.topics.topic import Topic

#: Key_Shared draining-hash stats fields and the metric suffix each one feeds
DRAINING_FIELDS = {
    "draining_hashes_count": "drainingHashesCount",
    "draining_hashes_unacked_messages": "drainingHashesUnackedMessages",
    "draining_hashes_cleared_total": "drainingHashesClearedTotal",
}


def _draining_values(prefix: str, stats: dict[str, Any]) -> Iterator[tuple[str, float]]:
    for suffix, name in DRAINING_FIELDS.items():
        yield f"{prefix}_{suffix}", float(stats.get(name) or 0)


def _column_index(columns: tuple[str, ...]) -> dict[str, int]:
    return {name: index for index, name in enumerate(columns)}


_TOPIC = _column_index(TOPIC_COLUMNS)
_SUBSCRIPTION = _column_index(SUBSCRIPTION_COLUMNS)
_CONSUMER = _column_index(CONSUMER_COLUMNS)


def _row(columns: dict[str, int], values: Iterable[tuple[str, float]]) -> tuple[float, ...]:
    """The values in their table's column order (columns not given are 0). A tuple of
    numbers, which the garbage collector stops tracking at its first look: a scrape holds
    a row per topic, subscription and consumer, and lists of them made every collection
    during the scrape walk them all (gen1 pauses of 14 to 33 ms at 10,000 topics)."""
    row = [0.0] * len(columns)
    for name, value in values:
        row[columns[name]] = value
    return tuple(row)


class _ConsumerReading(NamedTuple):
    """A consumer's rates, read once per scrape for its topic's, subscription's and own rows."""

    consumer: Consumer
    rate_out: float
    throughput_out: float
    rate_redeliver: float
    ack_rate: float

    @classmethod
    def of(cls, consumer: Consumer, now: int) -> _ConsumerReading:
        rate, throughput = consumer.msg_out.rate(now)
        return cls(consumer, rate, throughput, consumer.redeliver.rate(now)[0], consumer.acks.rate(now)[0])


class _SubscriptionReading(NamedTuple):
    """What the topic's and the subscription's rows both need, read once."""

    subscription: Subscription
    backlog: int
    delayed: DelayedStats
    consumers: list[_ConsumerReading]

    @classmethod
    def of(cls, sub: Subscription, now: int) -> _SubscriptionReading:
        return cls(sub, sub.backlog(), DELAYED_DELIVERY_STATS(sub),
                   [_ConsumerReading.of(c, now) for c in sub.consumers])


def _topic_values(topic: Topic, quotas: BacklogQuotas, subs: list[_SubscriptionReading],
                  now: int) -> tuple[float, ...]:
    """The topic's row, in TOPIC_COLUMNS order."""
    rate_in, throughput_in = topic.msg_in.rate(now)
    oldest = oldest_backlog(topic)
    size = topic.ledger.total_size_bytes()
    msg_in = topic.msg_in
    consumers = index_size = rate_out = throughput_out = out_bytes = out_messages = backlog = 0.0
    for sub in subs:
        consumers += len(sub.consumers)
        index_size += sub.delayed.index_size_bytes
        backlog += sub.backlog
        for reading in sub.consumers:
            rate_out += reading.rate_out
            throughput_out += reading.throughput_out
            out_bytes += reading.consumer.msg_out.total_bytes
            out_messages += reading.consumer.msg_out.total_msgs
    return _row(_TOPIC, (
        ("pulsar_storage_backlog_quota_limit", quotas.size.limit),
        ("pulsar_storage_backlog_quota_limit_time", quotas.time.limit),
        ("pulsar_storage_backlog_age_seconds", oldest.age_s(now) if oldest is not None else 0),
        ("pulsar_subscriptions_count", len(subs)),
        ("pulsar_producers_count", len(topic.producers)),
        ("pulsar_consumers_count", consumers),
        ("pulsar_rate_in", rate_in),
        ("pulsar_throughput_in", throughput_in),
        ("pulsar_rate_out", rate_out),
        ("pulsar_throughput_out", throughput_out),
        ("pulsar_storage_size", size),
        ("pulsar_storage_logical_size", size),
        ("pulsar_storage_backlog_size", topic_backlog_bytes(topic)),
        ("pulsar_msg_backlog", backlog),
        ("pulsar_storage_write_rate", rate_in * msg_in.total_events / msg_in.total_msgs if msg_in.total_msgs else 0.0),
        ("pulsar_delayed_message_index_size_bytes", index_size),
        ("pulsar_in_bytes_total", msg_in.total_bytes),
        ("pulsar_in_messages_total", msg_in.total_msgs),
        ("pulsar_out_bytes_total", out_bytes),
        ("pulsar_out_messages_total", out_messages),
    ))


def _subscription_values(reading: _SubscriptionReading, now: int) -> tuple[float, ...]:
    """The subscription's row, in SUBSCRIPTION_COLUMNS order."""
    sub, backlog, delayed = reading.subscription, reading.backlog, reading.delayed.messages
    rate_out = throughput_out = rate_redeliver = ack_rate = 0.0
    for c in reading.consumers:
        rate_out += c.rate_out
        throughput_out += c.throughput_out
        rate_redeliver += c.rate_redeliver
        ack_rate += c.ack_rate
    return _row(_SUBSCRIPTION, (
        ("pulsar_subscription_back_log", backlog),
        ("pulsar_subscription_back_log_no_delayed", max(0, backlog - delayed)),
        ("pulsar_subscription_delayed", delayed),
        ("pulsar_subscription_msg_rate_out", rate_out),
        ("pulsar_subscription_msg_throughput_out", throughput_out),
        ("pulsar_subscription_msg_rate_redeliver", rate_redeliver),
        ("pulsar_subscription_msg_ack_rate", ack_rate),
        ("pulsar_subscription_unacked_messages", sub.unacked_messages()),
        ("pulsar_subscription_blocked_on_unacked_messages", 1.0 if sub.dispatcher.blocked_on_unacked else 0.0),
        ("pulsar_subscription_consumers_count", len(reading.consumers)),
        ("pulsar_subscription_msg_rate_expired", sub.expired.rate(now)[0]),
        ("pulsar_subscription_total_msg_expired", sub.expired.total_msgs),
        ("pulsar_subscription_last_expire_timestamp", sub.expired.last_ms),
        *_draining_values("pulsar_subscription", extra_subscription_stats(sub)),
    ))


class ScrapeState:
    """What a scrape keeps on the event loop from start to end: the labels wanted, the
    delayed-delivery index rows (few: only topics with such an index), and the backlog
    quotas resolved so far. The rows themselves go out a part at a time."""

    def __init__(self, broker: AdminBroker) -> None:
        config = broker.config
        self.broker = broker
        self.header = ScrapeRows(config.clusterName, config.exposeTopicLevelMetricsInPrometheus,
                                 config.exposeConsumerLevelMetricsInPrometheus)
        self.delayed = DelayedIndexRows()
        #: namespace -> the backlog quotas of its topics that have none of their own
        self.quotas: dict[str, BacklogQuotas] = {}
        recorder = broker.recorder
        self.latency_sources: dict[str, Callable[[str], LatencyValues | None]] = {
            "pulsar_storage_write_latency": recorder.write_latency_of,
            "pulsar_storage_ledger_write_latency": recorder.ledger_write_latency_of}

    def quotas_of(self, topic: Topic) -> BacklogQuotas:
        """As ``lifecycle_checks.backlog_quotas_of``, resolved once per namespace for
        topics without quotas of their own."""
        broker = self.broker
        if broker.policies.topic_policies(topic.name).backLogQuotaMap:
            return lifecycle_checks.backlog_quotas_of(broker.policies, topic.name)
        namespace = topic.name.namespace_name
        found = self.quotas.get(namespace)
        if found is None:
            found = self.quotas[namespace] = lifecycle_checks.backlog_quotas_of(broker.policies, topic.name)
        return found


#: topics read into a part before it is handed on, at the start of the next slice: the loop
#: is idle then (a slice cut short by a client must not pickle and send a part before the
#: loop serves it), and pickling a part of this size is about as long as reading a topic
PART_TOPICS = 8


async def snapshot_parts(scrape: ScrapeState) -> AsyncIterator[ScrapeRows]:
    """The rows of every loaded topic, copied from live state a slice of topics at a time
    and handed on in parts of at least PART_TOPICS topics, each at the start of a slice."""
    broker = scrape.broker
    pacer = ScrapePacer(broker.activity)
    part = scrape.header.empty()
    in_part = 0
    for topic in list(broker.topics.values()):
        if broker.topics.get(str(topic.name)) is not topic:
            continue  # unloaded or deleted since the scrape began
        _add_topic(part, scrape, topic, broker.now_ms())
        in_part += 1
        if pacer.due():
            await pacer.rest()
            if in_part >= PART_TOPICS:
                yield part
                part, in_part = scrape.header.empty(), 0
    yield part


def _add_topic(part: ScrapeRows, scrape: ScrapeState, topic: Topic, now: int) -> None:
    namespace = topic.name.namespace_name
    add_to(part.topic_counts, namespace, 1)
    key = (part.cluster, namespace, str(topic.name)) if part.by_topic else (part.cluster, namespace)
    subs = [_SubscriptionReading.of(sub, now) for sub in topic.subscriptions.values()]
    add_to(part.topic_rows, key, _topic_values(topic, scrape.quotas_of(topic), subs, now))
    for kind, count in topic.quota_evictions.items():
        add_to(part.evictions, (*key, kind), count)
    for base, source in scrape.latency_sources.items():
        latency = source(topic.ledger.name)
        if latency is not None:
            add_to(part.latency[base], key, latency)
    if part.by_topic:
        for reading in sorted(subs, key=_subscription_name):
            name = reading.subscription.name
            part.subscription_rows[(*key, name)] = _subscription_values(reading, now)
            if part.with_consumers:
                for c in reading.consumers:
                    consumer = c.consumer
                    part.consumer_rows[(*key, name, consumer.consumer_name, str(consumer.consumer_id))] = \
                        _consumer_values(reading.subscription, c)
    scrape.delayed.add_topic(part.cluster, topic, part.by_topic)


def _subscription_name(reading: _SubscriptionReading) -> str:
    return reading.subscription.name


def _consumer_values(sub: Subscription, reading: _ConsumerReading) -> tuple[float, ...]:
    """The consumer's row, in CONSUMER_COLUMNS order."""
    c = reading.consumer
    return _row(_CONSUMER, (
        ("pulsar_consumer_msg_rate_out", reading.rate_out),
        ("pulsar_consumer_msg_throughput_out", reading.throughput_out),
        ("pulsar_consumer_msg_rate_redeliver", reading.rate_redeliver),
        ("pulsar_consumer_msg_ack_rate", reading.ack_rate),
        ("pulsar_consumer_unacked_messages", c.unacked_messages),
        ("pulsar_consumer_blocked_on_unacked_messages", 1.0 if c.blocked_on_unacked else 0.0),
        ("pulsar_consumer_available_permits", max(0, c.permits)),
        *_draining_values("pulsar_consumer", extra_consumer_stats(sub, c)),
    ))


def _publish_latency(broker: AdminBroker) -> Metric:
    latency = broker.recorder.publish_latency
    name = "pulsar_broker_publish_latency"
    metric = Metric(name, "Publish latency from append to durable (seconds)", "summary")
    cluster = broker.config.clusterName
    for quantile, value in latency.quantiles():
        metric.add_sample(name, {"cluster": cluster, "quantile": str(quantile)}, value)
    metric.add_sample(f"{name}_count", {"cluster": cluster}, latency.count)
    metric.add_sample(f"{name}_sum", {"cluster": cluster}, latency.sum_s)
    return metric


def _disk(broker: AdminBroker) -> list[Metric]:
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


def _entry_cache(broker: AdminBroker) -> Metric:
    """Pulsar's ``pulsar_ml_cache_used_size``: bytes held by the tail caches of all topics
    (bounded by ``managedLedgerCacheSizeMB``)."""
    used = GaugeMetricFamily("pulsar_ml_cache_used_size", "Bytes of entries held by the managed ledger cache",
                             labels=["cluster"])
    budget = broker.ledger_factory.cache_budget
    used.add_metric([broker.config.clusterName], budget.used_bytes if budget is not None else 0)
    return used


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


async def metrics_text(broker: AdminBroker, direct: ScrapeSocket | None = None) -> AsyncIterator[bytes]:
    """The scrape, streamed: values read on the event loop a slice of topics at a time and
    handed to a child process (:mod:`magnetar.admin.metrics_worker`) that makes the text,
    which the loop passes on, or which the child writes to the scraper's socket itself
    (``direct``, :mod:`magnetar.admin.scrape_socket`); if no child can be started, made on
    the loop. Slices run while the loop is idle (:mod:`magnetar.admin.scrape_pacing`), so a
    scrape of many topics does not hold up publishing (a worker thread would, through the
    interpreter lock)."""
    yield _process_text()
    scrape = ScrapeState(broker)
    async for chunk in _rows_text(scrape, direct):
        yield chunk
    for metric in [*scrape.delayed.families(), _publish_latency(broker), *_disk(broker), _entry_cache(broker),
                   *loop_lag_families(broker.loop_lag, broker.config.clusterName),
                   *load_balancing_families(broker.cluster, broker.config.clusterName)]:
        yield generate_latest(_One(metric))  # type: ignore[arg-type]


async def _rows_text(scrape: ScrapeState, direct: ScrapeSocket | None = None) -> AsyncIterator[bytes]:
    socket_fd = direct.fd if direct is not None and await direct.flushed() else None
    try:
        async for chunk in text_elsewhere(scrape.header, snapshot_parts(scrape), scrape.broker.activity, socket_fd):
            yield chunk
        return
    except NoWorker as exc:
        log.warning("metrics text made on the event loop: no worker process (%s)", exc)
    async for chunk in text_on_the_loop(scrape.header, snapshot_parts(scrape), scrape.broker.activity):
        yield chunk


async def text_on_the_loop(header: ScrapeRows, parts: AsyncIterable[ScrapeRows],
                           activity: Activity | None = None) -> AsyncIterator[bytes]:
    """The parts' text made here, a slice at a time, when no child can make it."""
    rows = header.empty()
    async for part in parts:
        rows.add(part)
    pacer = ScrapePacer(activity)
    for chunk in rows_text(rows):
        yield chunk
        await pacer.turn()
    for table in rows.tables().values():
        await release(table, activity)


#: rows freed between two looks at the clock
RELEASED_PER_TURN = 50


async def release(rows: dict[Any, Any], activity: Activity | None = None) -> None:
    """Free the rows a slice at a time: freeing a row per topic at once holds the event
    loop as long as building them did (the latency and eviction rows left to go with
    the snapshot held it 47 to 55 ms at 50,000 topics)."""
    pacer = ScrapePacer(activity)
    while rows:
        for _ in range(min(len(rows), RELEASED_PER_TURN)):
            rows.popitem()
        await pacer.turn()
