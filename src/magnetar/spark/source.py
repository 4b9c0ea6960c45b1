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

from magnetar.spark.data_loss import DataLossCheck
from magnetar.spark.holding import QueryHold, new_subscription_name
from magnetar.spark.offsets import EARLIEST, MessagePosition, SourceOffset
from magnetar.spark.options import SourceOptions
from magnetar.spark.planning import (
    check_range,
    ending_positions,
    plan_ranges,
    resolve_partitions,
    starting_positions,
)
from magnetar.spark.reading import MagnetarInputPartition, read_range
from magnetar.spark.rest import AdminClient, MagnetarAdminError

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
        self._hold: QueryHold | None = None
        self._check = DataLossCheck(options.fail_on_data_loss)

    # -- offsets ----------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        """The query's start, with its durable subscriptions created there (see :mod:`magnetar.spark.holding`)."""
        with AdminClient(self.options.connection) as admin:
            topics = resolve_partitions(admin, self.options.selection)
            starts = starting_positions(admin, self.options, topics, default="latest")
            hold = self._hold_named(None)
            hold.ensure(admin, starts)
        return SourceOffset(starts, hold.name).to_json()

    def _hold_named(self, checkpointed: str | None) -> QueryHold:
        """The query's subscriptions: named by the option, else by the checkpointed offsets, else anew."""
        name = self.options.subscription_name or checkpointed or \
            (self._hold.name if self._hold is not None else new_subscription_name())
        if self._hold is None or self._hold.name != name:
            self._hold = QueryHold(name)
        return self._hold

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_json(start)
        with AdminClient(self.options.connection) as admin:
            hold = self._hold_named(begin.subscription)
            topics, latest = self._current_partitions(admin, begin)
            # Planning counts from where something can be read; a range wholly deleted is empty.
            starts = {tp: self._check.readable_start(admin, tp, begin.get(tp)).nothing_through for tp in topics}
            # Before anything is planned: a restart finds its subscriptions (or makes them again at
            # the checkpointed offsets), a partition met for the first time gets one.
            hold.ensure(admin, starts)
            # ``start`` is the end of the last batch in Spark's commit log. Spark calls commit()
            # only when it constructs another batch, so a query that stops (Trigger.AvailableNow,
            # or no new data) would otherwise leave its subscription one batch behind.
            hold.move(admin, {tp: p for tp, p in begin.positions.items() if starts.get(tp) == p})
            if self._target is not None:
                latest = {tp: self._target.get(tp, EARLIEST) for tp in topics}
        self._latest_seen = SourceOffset(latest, hold.name)
        if isinstance(limit, ReadMaxRows):
            from magnetar.spark.admission import BacklogWalker
            ends = BacklogWalker(self.options).advance(starts, latest, limit.max_rows)
        else:
            ends = {tp: max(latest[tp], starts[tp]) for tp in topics}
        for tp, position in begin.positions.items():
            ends.setdefault(tp, position)  # a topic that disappeared keeps its last offset
        return SourceOffset(ends, hold.name).to_json()

    def _current_partitions(self, admin: AdminClient, begin: SourceOffset,
                            ) -> tuple[list[str], dict[str, MessagePosition]]:
        """The partitions the query reads now and their last message ids; a partition the query
        has read that no longer exists is reported as data loss, one that now ends before what
        the query has read is checked again."""
        latest = self._latest_positions(admin)
        for tp, position in sorted(begin.positions.items()):
            if tp not in latest:
                self._check.topic_gone(admin, tp, position)
            elif latest[tp] < position:
                self._check.topic_behind(tp, position)
        return sorted(latest), latest

    def _latest_positions(self, admin: AdminClient) -> dict[str, MessagePosition]:
        """The last message id of every partition the query reads that exists."""
        latest: dict[str, MessagePosition] = {}
        for tp in resolve_partitions(admin, self.options.selection):
            try:
                latest[tp] = admin.last_message_id(tp)
            except MagnetarAdminError as exc:
                if exc.status != 404:
                    raise
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest_seen.to_json() if self._latest_seen is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        with AdminClient(self.options.connection) as admin:
            self._target = self._latest_positions(admin)

    # -- planning and reading --------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = SourceOffset.from_json(start), SourceOffset.from_json(end)
        parts = []
        with AdminClient(self.options.connection) as admin:
            for tp in sorted(finish.positions):
                readable = self._check.readable_start(admin, tp, begin.get(tp))
                last = finish.positions[tp]
                if last > readable.nothing_through:
                    parts.append(MagnetarInputPartition(tp, readable.read_from, last))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MagnetarInputPartition):
            return iter(())
        return read_range(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Move the query's subscriptions to the committed offsets: the broker keeps what follows."""
        done = SourceOffset.from_json(end)
        with AdminClient(self.options.connection) as admin:
            self._hold_named(done.subscription).move(admin, done.positions)

    def stop(self) -> None:
        pass
