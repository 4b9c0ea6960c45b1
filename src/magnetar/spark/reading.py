"""Executor side of the source: read one range of one topic partition into Arrow batches.

A range runs from an exclusive start to an inclusive end, both message ids
(:class:`~magnetar.spark.offsets.MessagePosition`). The official client's Reader is
opened *at* the start message, inclusively, and the messages up to the start are
skipped: seeing the start message proves that nothing after it was removed. When
it is gone and the first message read is not its immediate successor, retention
dropped messages the query needed, and the task fails (``failOnDataLoss=true``) or
logs a warning and goes on from what is there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from magnetar.spark.offsets import MessagePosition
from magnetar.spark.options import SourceOptions

if TYPE_CHECKING:
    import pulsar
    import pyarrow as pa

log = logging.getLogger("magnetar.spark")

#: Rows per Arrow record batch handed to Spark.
ARROW_BATCH_ROWS = 8192
#: Payload bytes per Arrow record batch handed to Spark.
ARROW_BATCH_BYTES = 8 << 20
#: How long one read waits before asking the broker whether more messages exist.
READ_WAIT_MS = 1000
DEFAULT_RECEIVER_QUEUE_SIZE = 10_000


class MagnetarDataLossError(RuntimeError):
    """Messages a query needed are no longer in the topic."""


class MagnetarInputPartition(InputPartition):
    """One Spark task's work: messages after ``start`` up to and including ``end`` of one topic partition."""

    def __init__(self, topic: str, start: MessagePosition, end: MessagePosition) -> None:
        super().__init__(f"{topic} ({start}, {end}]")
        self.topic = topic
        self.start = start
        self.end = end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MagnetarInputPartition) and \
            (self.topic, self.start, self.end) == (other.topic, other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.topic, self.start, self.end))


def read_range(part: MagnetarInputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` as Arrow record batches in the source schema."""
    client = options.connection.new_client()
    try:
        reader = client.create_reader(part.topic, reader_start(part.start), start_message_id_inclusive=True,
                                      **_reader_kwargs(options))
        try:
            yield from RangeScan(part, options).batches(reader)
        finally:
            reader.close()
    finally:
        client.close()


def reader_start(start: MessagePosition) -> pulsar.MessageId:
    """Where a Reader opened inclusively must start to see ``start`` itself."""
    import pulsar
    if start.is_earliest:
        return pulsar.MessageId.earliest
    return pulsar.MessageId(-1, start.ledger_id, start.entry_id, start.batch_index)


def _reader_kwargs(options: SourceOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"receiver_queue_size": DEFAULT_RECEIVER_QUEUE_SIZE}
    kwargs.update(options.reader_kwargs())
    return kwargs


class RangeScan:
    """Reads one range and checks it for data loss; independent of Spark so it can be tested alone.

    The first messages (up to and including the start) are examined one by one; past
    them, a tight loop compares each message id with the end in C++ and appends the
    message's fields to column lists, since per-message Python work bounds the rate.
    """

    def __init__(self, part: MagnetarInputPartition, options: SourceOptions) -> None:
        self.part = part
        self.fail_on_data_loss = options.fail_on_data_loss
        self.poll_timeout_ms = options.poll_timeout_ms
        self.start_key = part.start.sort_key
        self.end_key = part.end.sort_key

    def batches(self, reader: Any) -> Iterator[pa.RecordBatch]:
        import pulsar
        raw = reader._reader  # the C++ binding's reader: the Python wrapper costs ~2 µs a message
        first = self._first_after_start(raw)
        if first is None:
            return
        end_id = _end_message_id(self.part.end)
        builder = ArrowBatchBuilder(self.part.topic)
        values, keys, ids, publish_ms, event_ms, properties, producers = builder.columns()
        msg, mid = first
        timeout = pulsar.Timeout
        rows = size = 0
        while True:
            # One comparison per message in C++; the second only at the end of the range.
            reached_end = not mid < end_id
            if reached_end and end_id < mid:
                break
            data = msg.data()
            values.append(data)
            keys.append(msg.partition_key() or None)
            ids.append(mid.serialize())
            publish_ms.append(msg.publish_timestamp())
            event_ms.append(msg.event_timestamp())
            properties.append(msg.properties())
            producers.append(msg.producer_name())
            rows += 1
            size += len(data)
            if rows >= ARROW_BATCH_ROWS or size >= ARROW_BATCH_BYTES:
                yield builder.flush()
                values, keys, ids, publish_ms, event_ms, properties, producers = builder.columns()
                rows = size = 0
            if reached_end:
                break
            try:
                msg = raw.read_next(READ_WAIT_MS)
            except timeout:
                msg = self._next(raw, _position(mid))
                if msg is None:
                    self._check_reached_end(_position(mid))
                    break
            mid = msg.message_id()
        if rows:
            yield builder.flush()

    def _first_after_start(self, raw: Any) -> tuple[Any, Any] | None:
        """The first message after the start, once continuity with the start is checked."""
        saw_start = self.part.start.is_earliest
        last: MessagePosition | None = None
        while True:
            msg = self._next(raw, last)
            if msg is None:
                self._check_reached_end(last)
                return None
            mid = msg.message_id()
            last = _position(mid)
            if last.sort_key <= self.start_key:
                saw_start = True
                continue
            if not saw_start and not last.follows(self.part.start):
                self._data_loss(f"the query needs the messages after {self.part.start} of {self.part.topic}, "
                                f"but the first message still stored is {last}: retention (or "
                                "acknowledgements by every subscription) removed the messages in between")
            return msg, mid

    def _next(self, raw: Any, last: MessagePosition | None) -> Any:
        """The next message; None when the broker says the topic has nothing more."""
        import pulsar
        waited_ms = 0
        while True:
            try:
                return raw.read_next(READ_WAIT_MS)
            except pulsar.Timeout:
                pass
            if not raw.has_message_available():
                return None
            waited_ms += READ_WAIT_MS
            if waited_ms >= self.poll_timeout_ms:
                raise TimeoutError(f"no message from {self.part.topic} within pollTimeoutMs="
                                   f"{self.poll_timeout_ms} although the broker reports more; last read {last}")

    def _check_reached_end(self, last: MessagePosition | None) -> None:
        if last is not None and (last.sort_key >= self.end_key or last.same_entry(self.part.end)):
            return
        self._data_loss(f"the query needs the messages of {self.part.topic} up to {self.part.end}, but "
                        f"the topic ends at {last if last is not None else 'nothing'}: were messages "
                        "removed or the topic deleted and created again?")

    def _data_loss(self, message: str) -> None:
        if self.fail_on_data_loss:
            raise MagnetarDataLossError(
                f"Data loss: {message}. Set failOnDataLoss=false to go on from the messages that remain.")
        log.warning("Data loss (failOnDataLoss=false, going on): %s", message)


def _position(mid: Any) -> MessagePosition:
    return MessagePosition(mid.ledger_id(), mid.entry_id(), mid.batch_index())


def _end_message_id(end: MessagePosition) -> Any:
    """The end as a client message id; "whole entry" becomes the largest batch index, so the
    client's ordering (ledger, entry, batch index) matches ours."""
    import pulsar
    batch = end.batch_index if end.batch_index >= 0 else (1 << 31) - 1
    return pulsar.MessageId(-1, end.ledger_id, end.entry_id, batch)._msg_id


class ArrowBatchBuilder:
    """Column lists filled message by message, turned into one Arrow record batch at a time."""

    def __init__(self, topic: str) -> None:
        from magnetar.spark.schema import source_arrow_schema
        self.topic = topic
        self.schema = source_arrow_schema()
        self._lists: tuple[list[Any], ...] = ()

    def columns(self) -> tuple[list[Any], ...]:
        """Fresh lists for value, key, message id, publish ms, event ms (0: unset), properties, producer."""
        self._lists = tuple([] for _ in range(7))
        return self._lists

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc
        values, keys, ids, publish_ms, event_ms, properties, producers = self._lists
        rows = len(values)
        s = self.schema
        micros = s.field(4).type
        events = pa.array(event_ms, pa.int64())
        events = pc.if_else(pc.equal(events, 0), pa.scalar(None, pa.int64()), events)
        columns = [
            pa.array(values, s.field(0).type),
            pa.array(keys, s.field(1).type),
            pa.array([self.topic] * rows, s.field(2).type),
            pa.array(ids, s.field(3).type),
            pc.multiply(pa.array(publish_ms, pa.int64()), 1000).cast(micros),
            pc.multiply(events, 1000).cast(micros),
            pa.array(properties, s.field(6).type),
            pa.array(producers, s.field(7).type),
            # A Reader's messages are never redelivered.
            pa.array([0] * rows, s.field(8).type),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=s)
