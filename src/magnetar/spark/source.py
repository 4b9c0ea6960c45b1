"""The source: batch reads of a backlog and Structured Streaming reads with offsets.

Constructors only keep the parsed options; they never connect. The broker is asked
when Spark plans (``partitions``, ``initialOffset``, ``latestOffset``), through the
admin REST API, and read by executors (``read``) through the official client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from magnetar.spark.offsets import EARLIEST, MessagePosition, SourceOffset
from magnetar.spark.options import SourceOptions
from magnetar.spark.planning import (
    check_range,
    ending_positions,
    latest_positions,
    plan_ranges,
    resolve_partitions,
    starting_positions,
)
from magnetar.spark.reading import MagnetarInputPartition, read_range
from magnetar.spark.rest import AdminClient

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("magnetar.spark")


class MagnetarBatchReader(DataSourceReader):
    """``spark.read.format("magnetar")``: from startingOffsets (default earliest) to endingOffsets (latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        with AdminClient(self.options.connection) as admin:
            topics = resolve_partitions(admin, self.options.selection)
            starts = starting_positions(admin, self.options, topics, default="earliest")
            ends = ending_positions(admin, self.options, topics)
            for tp in topics:
                check_range(tp, starts[tp], ends[tp])
            return plan_ranges(admin, self.options, starts, ends, split=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MagnetarInputPartition):
            return iter(())  # Spark plans one empty InputPartition(None) when there is nothing to read
        return read_range(partition, self.options)


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("magnetar")``: micro-batches between checkpointed offsets.

    One Spark partition per topic partition and micro-batch: the split depends on the
    offsets alone, so a replayed batch reads exactly what it read before.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[str, MessagePosition] | None = None
        self._latest_seen: SourceOffset | None = None
        self._subscription_at: dict[str, MessagePosition] = {}

    # -- offsets ----------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        with AdminClient(self.options.connection) as admin:
            topics = resolve_partitions(admin, self.options.selection)
            starts = starting_positions(admin, self.options, topics, default="latest")
            if self.options.subscription_name:
                for tp, position in starts.items():
                    admin.create_subscription(tp, self.options.subscription_name, position)
        return SourceOffset(starts).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_json(start)
        # ``start`` is the end of a batch Spark has already committed: Spark calls commit()
        # only when it constructs another batch, so a query that stops (Trigger.AvailableNow,
        # or no new data) would otherwise leave the subscription one batch behind.
        self._move_subscription(begin)
        with AdminClient(self.options.connection) as admin:
            topics = resolve_partitions(admin, self.options.selection)
            latest = latest_positions(admin, topics) if self._target is None else \
                {tp: self._target.get(tp, EARLIEST) for tp in topics}
        self._latest_seen = SourceOffset(latest)
        starts = {tp: begin.get(tp) for tp in topics}
        if isinstance(limit, ReadMaxRows):
            from magnetar.spark.admission import BacklogWalker
            ends = BacklogWalker(self.options).advance(starts, latest, limit.max_rows)
        else:
            ends = {tp: max(latest[tp], starts[tp]) for tp in topics}
        for tp, position in begin.positions.items():
            ends.setdefault(tp, position)  # a topic that disappeared keeps its last offset
        return SourceOffset(ends).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest_seen.to_json() if self._latest_seen is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        with AdminClient(self.options.connection) as admin:
            self._target = latest_positions(admin, resolve_partitions(admin, self.options.selection))

    # -- planning and reading --------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = SourceOffset.from_json(start), SourceOffset.from_json(end)
        parts = []
        for tp in sorted(finish.positions):
            first, last = begin.get(tp), finish.positions[tp]
            if last > first:
                parts.append(MagnetarInputPartition(tp, first, last))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MagnetarInputPartition):
            return iter(())
        return read_range(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Move the progress subscription to the committed offsets (see ``subscriptionName``)."""
        self._move_subscription(SourceOffset.from_json(end))

    def _move_subscription(self, done: SourceOffset) -> None:
        name = self.options.subscription_name
        if not name:
            return
        moved = {tp: p for tp, p in done.positions.items() if self._subscription_at.get(tp) != p}
        if not moved:
            return
        with AdminClient(self.options.connection) as admin:
            for tp, position in sorted(moved.items()):
                admin.reset_cursor(tp, name, position)
                self._subscription_at[tp] = position

    def stop(self) -> None:
        pass
