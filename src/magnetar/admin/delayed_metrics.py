"""PIP-195's delayed-message index metrics on ``/metrics``, labelled as Pulsar labels them.

Each subscription with a bucket tracker gives its own series (``cluster``, ``namespace``,
``topic``, ``subscription``); each topic also gets the sum over its subscriptions without
the ``subscription`` label, as Pulsar's topic stats carry both. With
``exposeTopicLevelMetricsInPrometheus=false`` only the per-namespace sums are left. When
the index is shared by a topic's subscriptions (``delayedDeliverySharedIndexEnabled``)
there is no exact per-subscription figure, so that topic has only the topic series.

``pulsar_delayed_message_index_bucket_op_count`` keeps its exact name (a prometheus-client
counter would append ``_total``), and ``..._op_latency_ms`` carries Pulsar's ``quantile``
label whose values are the upper bounds of the latency ranges, with ``_count``/``_sum``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.bucket_delayed_message_index_stats import (
    BUCKET_TOTAL_NAME,
    INDEX_LOADED_NAME,
    OP_COUNT_NAME,
    OP_LATENCY_NAME,
    SNAPSHOT_SIZE_BYTES_NAME,
    MetricSample,
)

if TYPE_CHECKING:
    from magnetar.core.topics.topic import Topic

#: family name -> (Prometheus type, help)
FAMILIES = {
    BUCKET_TOTAL_NAME: ("gauge", "Delayed message index buckets (immutable buckets + the last mutable one)"),
    INDEX_LOADED_NAME: ("gauge", "Delayed message indexes held in memory"),
    SNAPSHOT_SIZE_BYTES_NAME: ("gauge", "Bytes of stored delayed message index bucket snapshots"),
    OP_COUNT_NAME: ("unknown", "Bucket snapshot operations by state (succeed, failed, all) and type"),
    OP_LATENCY_NAME: ("unknown", "Bucket snapshot operations by latency range (quantile = upper bound, ms)"),
}

Labels = tuple[tuple[str, str], ...]


def _family_of(sample_name: str) -> str:
    if sample_name.startswith(OP_LATENCY_NAME):
        return OP_LATENCY_NAME
    return sample_name


def subscription_samples(topic: Topic) -> Iterator[tuple[str, list[MetricSample]]]:
    """(subscription name, samples) for each subscription with its own bucket tracker."""
    for name, sub in sorted(topic.subscriptions.items()):
        if isinstance(sub.delayed_tracker, BucketDelayedDeliveryTracker):
            yield name, sub.delayed_tracker.metric_samples()


def shared_index_samples(topic: Topic) -> list[MetricSample]:
    """The topic-wide tracker's samples when the index is shared, else none."""
    index = topic.delayed.shared_index if topic.delayed is not None else None
    tracker = index.tracker if index is not None else None
    return tracker.metric_samples() if isinstance(tracker, BucketDelayedDeliveryTracker) else []


class _Rows:
    """Sample values by (sample name, labels), summing what lands on the same series."""

    def __init__(self) -> None:
        self.values: dict[str, dict[tuple[str, Labels], float]] = {name: {} for name in FAMILIES}

    def add(self, base: Labels, samples: Iterable[MetricSample]) -> None:
        for sample in samples:
            series = self.values[_family_of(sample.name)]
            key = (sample.name, base + sample.labels)
            series[key] = series.get(key, 0.0) + sample.value

    def families(self) -> Iterator[Metric]:
        for name, (kind, doc) in FAMILIES.items():
            metric = Metric(name, doc, kind)
            for (sample_name, labels), value in self.values[name].items():
                metric.add_sample(sample_name, dict(labels), value)
            yield metric


class DelayedIndexRows(_Rows):
    """The delayed-index series, fed one topic at a time."""

    def add_topic(self, cluster: str, topic: Topic, by_topic: bool) -> None:
        per_subscription = list(subscription_samples(topic))
        shared = shared_index_samples(topic)
        if not per_subscription and not shared:
            return  # most topics: no labels made for nothing (a scrape holds them to its end)
        base: Labels = (("cluster", cluster), ("namespace", topic.name.namespace_name))
        if by_topic:
            base += (("topic", str(topic.name)),)
        for name, samples in per_subscription:
            if by_topic:
                self.add(base + (("subscription", name),), samples)
            self.add(base, samples)
        self.add(base, shared)
