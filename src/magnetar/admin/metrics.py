"""Prometheus metrics with Pulsar's names, collected from live broker state at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector

from magnetar.server.clock import now_ms

if TYPE_CHECKING:
    from magnetar.server.broker import BrokerOperations


class TopicCollector:
    def __init__(self, broker: BrokerOperations) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        cluster = self.broker.config.clusterName
        labels = ["cluster", "namespace", "topic"]
        families = {
            "pulsar_rate_in": GaugeMetricFamily("pulsar_rate_in", "Messages published per second", labels=labels),
            "pulsar_throughput_in": GaugeMetricFamily("pulsar_throughput_in", "Bytes published per second",
                                                      labels=labels),
            "pulsar_storage_size": GaugeMetricFamily("pulsar_storage_size", "Topic storage size in bytes",
                                                     labels=labels),
            "pulsar_producers_count": GaugeMetricFamily("pulsar_producers_count", "Producers", labels=labels),
            "pulsar_subscriptions_count": GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions",
                                                            labels=labels),
            "pulsar_msg_backlog": GaugeMetricFamily("pulsar_msg_backlog", "Backlog in entries", labels=labels),
        }
        now = now_ms()
        for topic in list(self.broker.topics.values()):
            key = [cluster, topic.name.namespace_name, str(topic.name)]
            rate, throughput = topic.msg_in.rate(now)
            families["pulsar_rate_in"].add_metric(key, rate)
            families["pulsar_throughput_in"].add_metric(key, throughput)
            families["pulsar_storage_size"].add_metric(key, topic.ledger.total_size_bytes())
            families["pulsar_producers_count"].add_metric(key, len(topic.producers))
            families["pulsar_subscriptions_count"].add_metric(key, len(topic.subscriptions))
            families["pulsar_msg_backlog"].add_metric(key, sum(s.backlog() for s in topic.subscriptions.values()))
        yield from families.values()


def render_metrics(broker: BrokerOperations) -> tuple[bytes, str]:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    registry.register(TopicCollector(broker))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST
