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
        reader = client.create_reader(part.topic, _reader_start(part.start), start_message_id_inclusive=True,
                                      **_reader_kwargs(options))
        try:
            yield from RangeScan(part, options).batches(reader)
        finally:
            reader.close()
    finally:
        client.close()


def _reader_start(start: MessagePosition) -> pulsar.MessageId:
    import pulsar
    if start.is_earliest:
        return pulsar.MessageId.earliest
    return pulsar.MessageId(-1, start.ledger_id, start.entry_id, start.batch_index)


def _reader_kwargs(options: SourceOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"receiver_queue_size": DEFAULT_RECEIVER_QUEUE_SIZE}
    kwargs.update(options.reader_kwargs())
    return kwargs


class RangeScan:
    """Reads one range and checks it for data loss; independent of Spark so it can be tested alone."""

    def __init__(self, part: MagnetarInputPartition, options: SourceOptions) -> None:
        self.part = part
        self.fail_on_data_loss = options.fail_on_data_loss
        self.poll_timeout_ms = options.poll_timeout_ms
        self.start_key = part.start.sort_key
        self.end_key = part.end.sort_key
        self.checked_start = part.start.is_earliest
        self.last_seen: MessagePosition | None = None

    def batches(self, reader: Any) -> Iterator[pa.RecordBatch]:
        builder = ArrowBatchBuilder(self.part.topic)
        for msg, position in self._messages(reader):
            builder.add(msg, position)
            if builder.full():
                yield builder.flush()
        if builder.rows:
            yield builder.flush()

    def _messages(self, reader: Any) -> Iterator[tuple[Any, MessagePosition]]:
        raw = reader._reader  # the C++ binding's reader; the Python wrapper adds ~2 µs per message
        while True:
            msg = self._next(raw)
            if msg is None:
                self._check_reached_end()
                return
            mid = msg.message_id()
            position = MessagePosition(mid.ledger_id(), mid.entry_id(), mid.batch_index())
            key = position.sort_key
            self.last_seen = position
            if key <= self.start_key:
                self.checked_start = True
                continue
            if not self.checked_start:
                self.checked_start = True
                self._check_continuity(position)
            if key > self.end_key:
                return
            yield msg, position
            if key == self.end_key:
                return

    def _next(self, raw: Any) -> Any:
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
                                   f"{self.poll_timeout_ms} although the broker reports more; "
                                   f"last read {self.last_seen}")

    def _check_continuity(self, first: MessagePosition) -> None:
        if first.follows(self.part.start):
            return
        self._data_loss(f"the query needs the messages after {self.part.start} of {self.part.topic}, "
                        f"but the first message still stored is {first}: retention (or acknowledgements "
                        f"by every subscription) removed the messages in between")

    def _check_reached_end(self) -> None:
        last = self.last_seen
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


class ArrowBatchBuilder:
    """Column lists filled message by message, turned into one Arrow record batch at a time."""

    def __init__(self, topic: str) -> None:
        from magnetar.spark.schema import source_arrow_schema
        self.topic = topic
        self.schema = source_arrow_schema()
        self._reset()

    def _reset(self) -> None:
        self.values: list[bytes] = []
        self.keys: list[str | None] = []
        self.ids: list[bytes] = []
        self.publish_us: list[int] = []
        self.event_us: list[int | None] = []
        self.properties: list[list[tuple[str, str]]] = []
        self.producers: list[str] = []
        self.redeliveries: list[int] = []
        self.rows = 0
        self.payload_bytes = 0

    def add(self, msg: Any, position: MessagePosition) -> None:
        data = msg.data()
        self.values.append(data)
        self.keys.append(msg.partition_key() or None)
        self.ids.append(msg.message_id().serialize())
        self.publish_us.append(msg.publish_timestamp() * 1000)
        event = msg.event_timestamp()
        self.event_us.append(event * 1000 if event else None)
        props = msg.properties()
        self.properties.append(list(props.items()) if props else [])
        self.producers.append(msg.producer_name())
        self.redeliveries.append(msg.redelivery_count())
        self.rows += 1
        self.payload_bytes += len(data)

    def full(self) -> bool:
        return self.rows >= ARROW_BATCH_ROWS or self.payload_bytes >= ARROW_BATCH_BYTES

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa
        s = self.schema
        columns = [
            pa.array(self.values, s.field(0).type),
            pa.array(self.keys, s.field(1).type),
            pa.array([self.topic] * self.rows, s.field(2).type),
            pa.array(self.ids, s.field(3).type),
            pa.array(self.publish_us, s.field(4).type),
            pa.array(self.event_us, s.field(5).type),
            pa.array(self.properties, s.field(6).type),
            pa.array(self.producers, s.field(7).type),
            pa.array(self.redeliveries, s.field(8).type),
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=s)
        self._reset()
        return batch
