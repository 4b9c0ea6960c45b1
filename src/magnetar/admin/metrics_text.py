"""A scrape's rows as Prometheus text: the families, their names and how they are written.

The rows are plain values (no live broker state), so the text can be made in another
process (:mod:`magnetar.admin.metrics_worker`): at 50,000 topics it is about 440 MB, whose
formatting would otherwise hold the broker's interpreter for seconds at a time.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.utils import floatToGoString

from magnetar.core.stats import LATENCY_BUCKET_NAMES, LatencyValues

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
    "pulsar_storage_backlog_quota_limit": "Backlog quota size limit in bytes (-1: none)",
    "pulsar_storage_backlog_quota_limit_time": "Backlog quota time limit in seconds (-1: none)",
    "pulsar_storage_backlog_age_seconds": "Age of the oldest unacknowledged message",
}
EVICTIONS = "pulsar_storage_backlog_quota_exceeded_evictions_total"
EVICTIONS_DOC = "Backlog evictions for an exceeded quota (consumer_backlog_eviction), by quota_type (size, time)"
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

#: the values of a row, in order: its table's gauges, then its counters
TOPIC_COLUMNS = (*TOPIC_GAUGES, *TOPIC_COUNTERS)
SUBSCRIPTION_COLUMNS = (*SUBSCRIPTION_GAUGES, *SUBSCRIPTION_COUNTERS)
CONSUMER_COLUMNS = (*CONSUMER_GAUGES, *CONSUMER_COUNTERS)

LATENCY_SERIES = {
    "pulsar_storage_write_latency": "Publish latency: append to durable (ms)",
    "pulsar_storage_ledger_write_latency": "fsync latency of the group commit (ms)",
}


#: labels -> values in the table's column order (a tuple pickles and builds in a fraction
#: of a dict's time, and a scrape has a row per topic, subscription and consumer)
Rows = dict[tuple[str, ...], tuple[float, ...]]


@dataclass
class ScrapeRows:
    """The values of a scrape's per-topic, per-subscription and per-consumer families."""

    cluster: str
    by_topic: bool
    with_consumers: bool
    topic_counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    topic_rows: Rows = field(default_factory=dict)
    #: series base -> topic key -> (count per bucket..., count, sum in ms)
    latency: dict[str, dict[tuple[str, ...], LatencyValues]] = field(
        default_factory=lambda: {base: {} for base in LATENCY_SERIES})
    subscription_rows: Rows = field(default_factory=dict)
    consumer_rows: Rows = field(default_factory=dict)
    #: (*topic key, quota_type) -> evictions
    evictions: dict[tuple[str, ...], float] = field(default_factory=lambda: defaultdict(float))

    def tables(self) -> dict[str, dict[Any, Any]]:
        """Each table of rows by a name, for sending them elsewhere a part at a time."""
        return {"topic_counts": self.topic_counts, "topic_rows": self.topic_rows,
                "subscription_rows": self.subscription_rows, "consumer_rows": self.consumer_rows,
                "evictions": self.evictions, **{f"latency {base}": rows for base, rows in self.latency.items()}}

    def empty(self) -> ScrapeRows:
        """A part to fill: no rows, the same labels."""
        return ScrapeRows(self.cluster, self.by_topic, self.with_consumers)

    def add_table(self, name: str, items: Iterable[tuple[Any, Any]]) -> None:
        """Rows of another part added in (a key already here gets the sum)."""
        table = self.tables()[name]
        for key, value in items:
            add_to(table, key, value)

    def add(self, part: ScrapeRows) -> None:
        for name, table in part.tables().items():
            self.add_table(name, table.items())


def add_to(table: dict[Any, Any], key: Any, value: Any) -> None:
    """``table[key]`` plus ``value``: numbers add, rows add column by column. Rows by
    namespace sum their topics', which may come in different parts of a scrape."""
    held = table.get(key)
    if held is None:
        table[key] = value
    elif isinstance(held, tuple):
        table[key] = tuple(map(operator.add, held, value))
    else:
        table[key] = held + value


#: samples formatted per slice of a scrape's text
SAMPLES_PER_SLICE = 200


def rows_text(snap: ScrapeRows) -> Iterator[bytes]:
    """The scrape's families as text, in slices of at most SAMPLES_PER_SLICE samples."""
    labels = ["cluster", "namespace", "topic"] if snap.by_topic else ["cluster", "namespace"]
    counts = (((snap.cluster, ns), float(n)) for ns, n in sorted(snap.topic_counts.items()))
    yield from _family_text("pulsar_topics_count", "Number of topics", "gauge", ["cluster", "namespace"], counts)
    yield from _row_families(TOPIC_GAUGES, TOPIC_COUNTERS, labels, snap.topic_rows)
    yield from _family_text(EVICTIONS, EVICTIONS_DOC, "counter", [*labels, "quota_type"], snap.evictions.items())
    for base, doc in LATENCY_SERIES.items():
        merged = snap.latency[base]
        columns = [f"_le_{suffix}" for suffix in LATENCY_BUCKET_NAMES] + ["_count", "_sum"]
        titles = [f"bucket le {suffix}" for suffix in LATENCY_BUCKET_NAMES] + ["count", "sum"]
        for index, (column, title) in enumerate(zip(columns, titles, strict=True)):
            yield from _family_text(f"{base}{column}", f"{doc}, {title}", "gauge", labels,
                                    ((key, float(values[index])) for key, values in merged.items()))
    if snap.by_topic:
        yield from _row_families(SUBSCRIPTION_GAUGES, SUBSCRIPTION_COUNTERS,
                                 ["cluster", "namespace", "topic", "subscription"], snap.subscription_rows)
        if snap.with_consumers:
            yield from _row_families(CONSUMER_GAUGES, CONSUMER_COUNTERS, [
                "cluster", "namespace", "topic", "subscription", "consumer_name", "consumer_id"], snap.consumer_rows)


def _row_families(gauges: dict[str, str], counters: dict[str, str], labels: list[str],
                  rows: Rows) -> Iterator[bytes]:
    families = [("gauge", name, doc) for name, doc in gauges.items()]
    families += [("counter", name, doc) for name, doc in counters.items()]
    for column, (kind, name, doc) in enumerate(families):
        yield from _family_text(name, doc, kind, labels, _column(rows, column))


def _column(rows: Rows, column: int) -> Iterator[tuple[tuple[str, ...], float]]:
    for key, values in rows.items():
        yield key, values[column]


def _family_text(name: str, doc: str, kind: str, labels: list[str],
                 values: Iterable[tuple[tuple[str, ...], float]]) -> Iterator[bytes]:
    """Prometheus text of one family, as prometheus-client writes it (labels sorted by
    name, Go float format), without its per-sample checks: names here are fixed and valid."""
    if kind == "counter":
        name = name.removesuffix("_total") + "_total"
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    order = sorted(range(len(labels)), key=labels.__getitem__)
    heads = [f'{labels[i]}="' for i in order]
    lines = [f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"]
    for key, value in values:
        pairs = ",".join(head + _escape(key[i]) + '"' for head, i in zip(heads, order, strict=True))
        lines.append(f"{name}{{{pairs}}} {floatToGoString(value)}\n")
        if len(lines) >= SAMPLES_PER_SLICE:
            yield "".join(lines).encode()
            lines = []
    if lines:
        yield "".join(lines).encode()


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return value
