"""Counters for the bucket tracker's snapshot operations: Pulsar's
``BucketDelayedMessageIndexStats`` and PIP-195's metrics.

- ``pulsar_delayed_message_index_bucket_total`` (gauge): immutable buckets + the mutable one
- ``pulsar_delayed_message_index_loaded`` (gauge): indexes held in memory
- ``pulsar_delayed_message_index_bucket_snapshot_size_bytes`` (gauge)
- ``pulsar_delayed_message_index_bucket_op_count`` {state=succeed|failed|all,
  type=create|load|delete|merge} (counter; ``all`` counts attempts)
- ``pulsar_delayed_message_index_bucket_op_latency_ms`` {type, quantile=50|100|500|1000|
  5000|30000|60000|overflow} (per-range counts), plus ``_count`` and ``_sum``

Counters only grow here (Prometheus semantics); Pulsar resets its op counts on every
scrape. Latency is recorded only when the tracker was given a clock function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

BUCKET_TOTAL_NAME = "pulsar_delayed_message_index_bucket_total"
INDEX_LOADED_NAME = "pulsar_delayed_message_index_loaded"
SNAPSHOT_SIZE_BYTES_NAME = "pulsar_delayed_message_index_bucket_snapshot_size_bytes"
OP_COUNT_NAME = "pulsar_delayed_message_index_bucket_op_count"
OP_LATENCY_NAME = "pulsar_delayed_message_index_bucket_op_latency_ms"

#: Upper bounds (ms) of the latency ranges; slower operations count as "overflow".
LATENCY_BUCKETS_MS = (50, 100, 500, 1000, 5000, 30000, 60000)


class OpType(StrEnum):
    CREATE = "create"
    LOAD = "load"
    DELETE = "delete"
    MERGE = "merge"


class OpState(StrEnum):
    SUCCEED = "succeed"
    FAILED = "failed"
    ALL = "all"


class MetricSample(NamedTuple):
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def latency_bucket_label(latency_ms: float) -> str:
    for bound in LATENCY_BUCKETS_MS:
        if latency_ms <= bound:
            return str(bound)
    return "overflow"


@dataclass
class BucketDelayedMessageIndexStats:
    op_count: dict[tuple[OpState, OpType], int] = field(default_factory=dict)
    op_latency_ms: dict[OpType, dict[str, int]] = field(default_factory=dict)
    op_latency_sum_ms: dict[OpType, float] = field(default_factory=dict)

    def _count(self, state: OpState, op_type: OpType) -> None:
        key = (state, op_type)
        self.op_count[key] = self.op_count.get(key, 0) + 1

    def record_trigger(self, op_type: OpType) -> None:
        self._count(OpState.ALL, op_type)

    def record_success(self, op_type: OpType, latency_ms: float | None = None) -> None:
        self._count(OpState.SUCCEED, op_type)
        if latency_ms is not None:
            self.record_latency(op_type, latency_ms)

    def record_failure(self, op_type: OpType) -> None:
        self._count(OpState.FAILED, op_type)

    def record_latency(self, op_type: OpType, latency_ms: float) -> None:
        ranges = self.op_latency_ms.setdefault(op_type, {})
        label = latency_bucket_label(latency_ms)
        ranges[label] = ranges.get(label, 0) + 1
        self.op_latency_sum_ms[op_type] = self.op_latency_sum_ms.get(op_type, 0.0) + latency_ms

    def count(self, state: OpState, op_type: OpType) -> int:
        return self.op_count.get((state, op_type), 0)

    def samples(self, bucket_total: int, index_loaded: int, snapshot_size_bytes: int) -> list[MetricSample]:
        out = [
            MetricSample(BUCKET_TOTAL_NAME, (), bucket_total),
            MetricSample(INDEX_LOADED_NAME, (), index_loaded),
            MetricSample(SNAPSHOT_SIZE_BYTES_NAME, (), snapshot_size_bytes),
        ]
        for (state, op_type), count in sorted(self.op_count.items()):
            out.append(MetricSample(OP_COUNT_NAME, (("state", state.value), ("type", op_type.value)), count))
        for op_type, ranges in sorted(self.op_latency_ms.items()):
            for label, count in ranges.items():
                labels = (("type", op_type.value), ("quantile", label))
                out.append(MetricSample(OP_LATENCY_NAME, labels, count))
            type_label = (("type", op_type.value),)
            out.append(MetricSample(OP_LATENCY_NAME + "_count", type_label, sum(ranges.values())))
            out.append(MetricSample(OP_LATENCY_NAME + "_sum", type_label, self.op_latency_sum_ms[op_type]))
        return out
