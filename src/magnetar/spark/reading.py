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
from array import array
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from magnetar.spark.message_ids import EntryIds, encode_varint
from magnetar.spark.offsets import MessagePosition
from magnetar.spark.options import ConnectionOptions, SourceOptions

if TYPE_CHECKING:
    import numpy as np
    import pulsar
    import pyarrow as pa

    from magnetar.spark.entry_decoding import EntryMessages
    from magnetar.spark.record_decoding import TypedColumns
    from magnetar.spark.wire_session import EntrySession, ReceivedEntry

log = logging.getLogger("magnetar.spark")

#: Rows per Arrow record batch handed to Spark (batches hold whole entries, so one may run
#: over by part of an entry). A batch costs some fixed work on both sides (its columns made
#: and sent, read back into vectors by the JVM): 32768 rows of 100 bytes take about 10% less
#: of the Python worker's CPU than 8192.
ARROW_BATCH_ROWS = 32768
#: Payload bytes per Arrow record batch handed to Spark (likewise).
ARROW_BATCH_BYTES = 8 << 20
#: How long one read waits before asking the broker whether more messages exist.
READ_WAIT_MS = 1000
DEFAULT_RECEIVER_QUEUE_SIZE = 10_000
#: Permits a protocol-level read starts with, given back half at a time. Many, so the broker is
#: asked rarely and a busy machine's scheduling delays (the broker must run to answer) do not
#: stall the task; memory stays bounded, as the broker stops dispatching to a connection whose
#: unsent bytes pass pulsarChannelWriteBufferHighWaterMark and the task reads the socket only as
#: it goes.
ENTRY_SESSION_PERMITS = 100_000
#: The largest batch index: where a "whole entry" end sits among the client's message ids.
_LAST_INDEX = (1 << 31) - 1


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
    """The messages of ``part`` as Arrow record batches in the source schema.

    Entries are read at the protocol level (:class:`EntryScan`) when the connection
    settings allow; otherwise, and from the first entry only the official client can
    read (encrypted, chunked), through the official client's Reader (:class:`RangeScan`).
    """
    from magnetar.spark.entry_decoding import UnsupportedEntry
    from magnetar.spark.wire_session import supports
    if supports(options.connection):
        scan = EntryScan(part, options)
        try:
            yield from scan.batches()
            return
        except UnsupportedEntry:
            part = scan.remaining()
    yield from _read_with_client(part, options)


def _read_with_client(part: MagnetarInputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
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


class _RangeChecks:
    """What both scans decide alike: whether a range ended where it should, and what data loss does."""

    part: MagnetarInputPartition
    fail_on_data_loss: bool
    connection: ConnectionOptions

    def _check_reached_end(self, last: MessagePosition | None) -> None:
        if last is not None and (last.sort_key >= self.part.end.sort_key or last.same_entry(self.part.end)):
            return
        self._data_loss(f"the query needs the messages of {self.part.topic} up to {self.part.end}, but "
                        f"the topic ends at {last if last is not None else 'nothing'}: were messages "
                        "removed or the topic deleted and created again?")

    def _data_loss(self, message: str) -> None:
        from magnetar.spark.data_loss import describe_retention, loss_message, report_loss
        retention = describe_retention(self.connection, self.part.topic)
        report_loss(loss_message(self.part.topic, message, retention), self.fail_on_data_loss,
                    "the messages that remain")


class EntryScan(_RangeChecks):
    """Reads one range entry by entry over a protocol-level session, checking it for data loss.

    The session starts at the start's entry, so the start message itself is seen when it
    still exists; messages up to it are dropped, and the first one after it must be its
    immediate successor unless the start was seen. Entries past the end's entry end the
    scan without waiting for more.
    """

    def __init__(self, part: MagnetarInputPartition, options: SourceOptions) -> None:
        self.part = part
        self.options = options
        self.connection = options.connection
        self.fail_on_data_loss = options.fail_on_data_loss
        self.poll_timeout_ms = options.poll_timeout_ms
        #: The last message handed to Spark: where the official client takes over, if it must.
        self.emitted: MessagePosition | None = None
        self.ids = EntryIdWriter(part.topic)

    def remaining(self) -> MagnetarInputPartition:
        """The part of the range not yet handed to Spark."""
        if self.emitted is None:
            return self.part
        return MagnetarInputPartition(self.part.topic, self.emitted, self.part.end)

    def batches(self) -> Iterator[pa.RecordBatch]:
        from magnetar.spark.entry_decoding import UnsupportedEntry, decode_entry
        from magnetar.spark.wire_session import EntrySession
        part, start, end = self.part, self.part.start, self.part.end
        settings = self.options.reader_settings
        session = EntrySession(
            self.options.connection, part.topic, None if start.is_earliest else (start.ledger_id, start.entry_id),
            receiver_queue_size=int(settings.get("receiverQueueSize", ENTRY_SESSION_PERMITS)),
            reader_name=settings.get("readerName"))
        try:
            builder = ArrowBatchBuilder(part.topic, _typed_columns(self.options, part.topic))
            saw_start = start.is_earliest
            last: MessagePosition | None = None
            end_entry = (end.ledger_id, end.entry_id)
            while True:
                got = self._next(session, last)
                if got is None:
                    self._check_reached_end(last)
                    break
                try:
                    decoded = decode_entry(got.entry)
                except UnsupportedEntry:
                    if builder.rows:
                        yield builder.flush()
                    raise
                count, batched = decoded.count, decoded.batched
                entry = (got.ledger_id, got.entry_id)
                skip = _messages_up_to(entry, count, start) if not start.is_earliest else 0
                take = _messages_up_to(entry, count, end)
                if skip:
                    saw_start = True
                if take > skip:
                    first = MessagePosition(*entry, skip if batched else -1)
                    if not saw_start and not first.follows(start):
                        self._data_loss(f"the query needs the messages after {start} of {part.topic}, "
                                        f"but the first message still stored is {first}: retention (or "
                                        "acknowledgements by every subscription) removed the messages in between")
                    saw_start = True
                    builder.add_messages(decoded, skip, take, self.ids.of_entry(*entry, count if batched else 0))
                    self.emitted = MessagePosition(*entry, take - 1 if batched else -1)
                last = MessagePosition(*entry, count - 1 if batched else -1)
                session.consumed(count)
                if builder.rows >= ARROW_BATCH_ROWS or builder.size >= ARROW_BATCH_BYTES:
                    yield builder.flush()
                if entry >= end_entry:
                    break
            if builder.rows:
                yield builder.flush()
        finally:
            session.close()

    def _next(self, session: EntrySession, last: MessagePosition | None) -> ReceivedEntry | None:
        """The next entry; None when the broker says the topic has nothing after ``last``."""
        waited_ms = 0
        while True:
            got = session.next_entry(READ_WAIT_MS / 1000)
            if got is not None:
                return got
            seen = last if last is not None else self.part.start
            if MessagePosition(*session.last_message_id()).sort_key <= seen.sort_key:
                return None
            waited_ms += READ_WAIT_MS
            if waited_ms >= self.poll_timeout_ms:
                raise TimeoutError(f"no message from {self.part.topic} within pollTimeoutMs="
                                   f"{self.poll_timeout_ms} although the broker reports more; last read {last}")

def _messages_up_to(entry: tuple[int, int], count: int, bound: MessagePosition) -> int:
    """How many of an entry's ``count`` messages are at or before ``bound``."""
    bound_entry = (bound.ledger_id, bound.entry_id)
    if entry < bound_entry:
        return count
    if entry > bound_entry:
        return 0
    return count if bound.batch_index < 0 else min(count, bound.batch_index + 1)


class EntryIdWriter:
    """Serialised message ids, byte for byte what the official client's ``MessageId.serialize()``
    gives: ledger, entry, the partition when the topic is one, then batch index and size."""

    def __init__(self, topic: str) -> None:
        _, sep, index = topic.rpartition("-partition-")
        self.partition = int(index) if sep and index.isdigit() else -1

    def of_entry(self, ledger_id: int, entry_id: int, batch_size: int) -> EntryIds:
        """The ids of an entry of ``batch_size`` messages (0: not a batch), from its first message."""
        head = b"\x08" + encode_varint(ledger_id) + b"\x10" + encode_varint(entry_id)
        if self.partition >= 0:
            head += b"\x18" + encode_varint(self.partition)
        if not batch_size:
            return EntryIds(ledger_id, entry_id, -1, 0, head, b"", head)
        tail = b"\x30" + encode_varint(batch_size)
        return EntryIds(ledger_id, entry_id, 0, batch_size, head, tail, head + b"\x20\x00" + tail)


class RangeScan(_RangeChecks):
    """Reads one range and checks it for data loss; independent of Spark so it can be tested alone.

    The first messages (up to and including the start) are examined one by one. Past
    them the scan goes an entry at a time, since per-message calls into the client bound
    the rate (about a microsecond each). The first message read from an entry gives the
    message id, publish time and producer name, which every message of a batch entry
    shares; the rest of the entry costs four calls a message (payload, key, event time,
    properties) and is named from the first id (:class:`~magnetar.spark.message_ids.EntryIds`).
    The last message's own id confirms the entry arrived whole and in order; should it
    not, that entry's messages are taken one by one with their own ids.
    """

    def __init__(self, part: MagnetarInputPartition, options: SourceOptions) -> None:
        self.part = part
        self.connection = options.connection
        self.fail_on_data_loss = options.fail_on_data_loss
        self.poll_timeout_ms = options.poll_timeout_ms
        self.start_key = part.start.sort_key
        self.end_key = part.end.sort_key
        end = part.end
        #: The end as the client orders ids: (ledger, entry, batch index), "whole entry" being
        #: the largest batch index, and a message outside a batch having batch index -1.
        self.end_limit = (end.ledger_id, end.entry_id, end.batch_index if end.batch_index >= 0 else _LAST_INDEX)
        self.typed = _typed_columns(options, part.topic)

    def batches(self, reader: Any) -> Iterator[pa.RecordBatch]:
        import pulsar
        raw = reader._reader  # the C++ binding's reader: the Python wrapper costs ~2 µs a message
        first = self._first_after_start(raw)
        if first is None:
            return
        msg, mid = first
        builder = ArrowBatchBuilder(self.part.topic, self.typed)
        end_entry, end_index = self.end_limit[:2], self.end_limit[2]
        timeout = pulsar.Timeout
        while True:
            ids = EntryIds.parse(mid.serialize())
            index = ids.batch_index
            if (ids.ledger_id, ids.entry_id, index) > self.end_limit:
                break
            at_end = (ids.ledger_id, ids.entry_id) == end_entry
            rest = ids.rest_of_entry
            if at_end and index >= 0:
                rest = min(rest, end_index - index)
            run = [msg]
            complete = self._read_rest_of_entry(raw, run, rest, ids)
            last_index = index + rest if index >= 0 else -1
            if complete and (rest == 0 or run[-1].message_id().serialize() == ids.with_batch_index(last_index)):
                builder.add_entry(run, ids)
                last = MessagePosition(ids.ledger_id, ids.entry_id, last_index)
                # Past the end's entry every message is after the end: stop without waiting for one.
                done = at_end and (ids.entry_size_known or last_index >= end_index)
            else:
                last, done = self._add_one_by_one(run, builder)
                if not complete and not done:
                    self._check_reached_end(last)
                    done = True
            if builder.rows >= ARROW_BATCH_ROWS or builder.size >= ARROW_BATCH_BYTES:
                yield builder.flush()
            if done:
                break
            try:
                msg = raw.read_next(READ_WAIT_MS)
            except timeout:
                msg = self._next(raw, last)
                if msg is None:
                    self._check_reached_end(last)
                    break
            mid = msg.message_id()
        if builder.rows:
            yield builder.flush()

    def _read_rest_of_entry(self, raw: Any, run: list[Any], count: int, ids: EntryIds) -> bool:
        """Append the ``count`` messages that follow ``run[0]`` in its entry; False when the
        topic ends before them."""
        import pulsar
        read_next, timeout = raw.read_next, pulsar.Timeout
        for _ in range(count):
            try:
                run.append(read_next(READ_WAIT_MS))
            except timeout:
                msg = self._next(raw, MessagePosition(ids.ledger_id, ids.entry_id, ids.batch_index + len(run) - 1))
                if msg is None:
                    return False
                run.append(msg)
        return True

    def _add_one_by_one(self, run: list[Any], builder: ArrowBatchBuilder) -> tuple[MessagePosition, bool]:
        """Add the messages of ``run`` up to the end, each by its own id; returns the last
        position added and whether the end was reached."""
        last: MessagePosition | None = None
        for msg in run:
            mid = msg.message_id()
            position = _position(mid)
            key = (position.ledger_id, position.entry_id, position.batch_index)
            if key > self.end_limit:
                assert last is not None, "the first message of a run is never past the end"
                return last, True
            builder.add_message(msg, mid.serialize())
            last = position
            if key == self.end_limit:
                return last, True
        assert last is not None
        return last, False

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

def _typed_columns(options: SourceOptions, topic: str) -> TypedColumns | None:
    from magnetar.spark.schema_resolution import typed_columns
    return typed_columns(options, topic)


def _position(mid: Any) -> MessagePosition:
    return MessagePosition(mid.ledger_id(), mid.entry_id(), mid.batch_index())


class ArrowBatchBuilder:
    """Column lists filled an entry (or a message) at a time, turned into one Arrow record batch at a time.

    Publish time, producer name and schema version belong to the entry, so they are kept
    once per entry (run) and expanded by Arrow. With ``typed`` the payloads become the
    columns of the topic's schema (:mod:`magnetar.spark.record_decoding`).
    """

    def __init__(self, topic: str, typed: TypedColumns | None = None) -> None:
        from magnetar.spark.schema import source_arrow_schema
        self.topic = topic
        self.typed = typed
        self.schema = source_arrow_schema(typed.schema if typed is not None else None)
        #: Where the metadata columns start.
        self.metadata_at = len(self.schema) - (len(source_arrow_schema()) - 1)
        self.constant = ConstantColumns()
        self._reset()

    def _reset(self) -> None:
        from magnetar.spark.entry_decoding import BinaryColumn
        self.values = BinaryColumn()
        self.keys: list[str | None] = []
        self.ids = BinaryColumn()
        #: Milliseconds; 0: unset.
        self.event_ms: list[int] = []
        self.properties: list[dict[str, str]] = []
        #: Per run of messages from one entry: rows so far after it, publish time, producer.
        self.run_ends: list[int] = []
        self.publish_ms: list[int] = []
        self.producers: list[str] = []
        #: Per run: the schema version its messages were written with (-1: none).
        self.versions: list[int] = []
        self.size = 0

    @property
    def rows(self) -> int:
        return len(self.keys)

    def add_entry(self, run: list[Any], ids: EntryIds) -> None:
        """Messages of one entry in batch index order, the first named by ``ids``."""
        values = [m.data() for m in run]
        self.values.pending += values
        self.size += sum(map(len, values))
        self.keys += [m.partition_key() or None for m in run]
        self.event_ms += [m.event_timestamp() for m in run]
        self.properties += [m.properties() for m in run]
        self.ids.pending.append(ids.serialized)
        if len(run) > 1:
            self.ids.pending += ids.following(len(run) - 1)
        first = run[0]
        self.run_ends.append(self.rows)
        self.publish_ms.append(first.publish_timestamp())
        self.producers.append(first.producer_name())
        self.versions.append(first.int_schema_version())

    def add_messages(self, decoded: EntryMessages, lo: int, hi: int, ids: EntryIds) -> None:
        """Messages ``lo`` to ``hi`` (exclusive) of a decoded entry whose first message ``ids`` names."""
        if lo or hi < decoded.count:
            values = decoded.values[lo:hi]
            self.values.add_chunk(values)
            self.size += values.nbytes
            self.keys += decoded.keys[lo:hi]
            self.event_ms += decoded.event_ms[lo:hi]
            self.properties += decoded.properties[lo:hi]
        else:
            self.size += self.values.take_all(decoded.column)  # the entry's chunks, not concatenated
            self.keys += decoded.keys
            self.event_ms += decoded.event_ms
            self.properties += decoded.properties
        if decoded.batched:
            self.ids.add_part(ids.batch_id_run(lo, hi))
        else:
            self.ids.pending.append(ids.serialized)
        self.run_ends.append(self.rows)
        self.publish_ms.append(decoded.metadata.publish_time)
        self.producers.append(decoded.metadata.producer_name)
        self.versions.append(schema_version_number(decoded.metadata.schema_version))

    def add_message(self, msg: Any, serialized_id: bytes) -> None:
        data = msg.data()
        self.values.pending.append(data)
        self.size += len(data)
        self.keys.append(msg.partition_key() or None)
        self.event_ms.append(msg.event_timestamp())
        self.properties.append(msg.properties())
        self.ids.pending.append(serialized_id)
        self.run_ends.append(self.rows)
        self.publish_ms.append(msg.publish_timestamp())
        self.producers.append(msg.producer_name())
        self.versions.append(msg.int_schema_version())

    def flush(self) -> pa.RecordBatch:
        """The rows so far as one record batch; the builder starts over.

        Per-run values are expanded and times scaled with numpy rather than pyarrow's compute
        functions: each of those calls tries ``import dateutil`` (and, given a Python
        number, ``import pandas``) when they are not installed, some 250 µs a call in a
        Spark worker, five or more calls a batch.
        """
        import numpy as np
        import pyarrow as pa
        rows = self.rows
        s = self.schema
        constant = self.constant
        micros = pa.timestamp("us", tz="UTC")
        starts_ends = np.array([0, *self.run_ends], np.int64)
        run_rows = starts_ends[1:] - starts_ends[:-1]
        publish_us = np.repeat(_int64_numpy(self.publish_ms), run_rows) * 1000
        values = self.values.array()
        data = [values] if self.typed is None else \
            self.typed.columns(values.to_pylist(), self.keys, list(zip(self.run_ends, self.versions, strict=True)))
        key_type, properties_type = s.field(self.metadata_at).type, s.field(self.metadata_at + 5).type
        columns = data + [
            constant.nulls(rows, key_type) if self.keys.count(None) == rows else pa.array(self.keys, key_type),
            constant.string(self.topic, rows),
            self.ids.array(),
            pa.Array.from_buffers(micros, rows, [None, pa.py_buffer(publish_us)]),
            _event_times(_int64_numpy(self.event_ms), micros) if any(self.event_ms) else constant.nulls(rows, micros),
            pa.array(self.properties, properties_type) if any(self.properties) else
            constant.empty_maps(rows, properties_type),
            self._producer_names(run_rows),
            # A Reader's messages are never redelivered.
            constant.zeros(rows, pa.int32()),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=s)

    def _producer_names(self, run_rows: np.ndarray) -> pa.Array:
        """Each run's producer name on each of its rows."""
        import pyarrow as pa
        producers = self.producers
        if producers.count(producers[0]) == len(producers):
            return self.constant.string(producers[0], self.rows)
        from magnetar.spark.entry_decoding import BinaryColumn, RepeatedValue
        column = BinaryColumn()
        for name, count in zip(producers, run_rows.tolist(), strict=True):
            column.add_part(RepeatedValue(name.encode(), count))
        return column.array(pa.string())


class ConstantColumns:
    """Columns of one value throughout (the topic, nulls, empty maps), made once at the largest
    size asked for and handed out as slices of it: zero-copy, and Arrow's IPC writer sends a
    slice that starts at 0 as if it were a column of its own."""

    def __init__(self) -> None:
        self._made: dict[tuple[object, ...], pa.Array] = {}

    def _get(self, key: tuple[object, ...], rows: int, make: Callable[[int], pa.Array]) -> pa.Array:
        made = self._made.get(key)
        if made is None or len(made) < rows:
            if len(self._made) >= 64:  # topics, producers and types seen by one scan: few
                self._made.clear()
            made = self._made[key] = make(rows)
        return made if len(made) == rows else made.slice(0, rows)

    def string(self, value: str, rows: int) -> pa.Array:
        import pyarrow as pa
        return self._get(("string", value), rows, lambda n: pa.repeat(pa.scalar(value, pa.string()), n))

    def nulls(self, rows: int, type_: pa.DataType) -> pa.Array:
        import pyarrow as pa
        return self._get(("nulls", type_), rows, lambda n: pa.nulls(n, type_))

    def zeros(self, rows: int, type_: pa.DataType) -> pa.Array:
        import pyarrow as pa
        return self._get(("zeros", type_), rows, lambda n: pa.repeat(pa.scalar(0, type_), n))

    def empty_maps(self, rows: int, type_: pa.MapType) -> pa.Array:
        import pyarrow as pa

        def make(n: int) -> pa.Array:
            offsets = pa.repeat(pa.scalar(0, pa.int32()), n + 1)
            return pa.MapArray.from_arrays(offsets, pa.array([], type_.key_type), pa.array([], type_.item_type),
                                           type=type_)
        return self._get(("empty maps", type_), rows, make)


def schema_version_number(raw: bytes) -> int:
    """A message's schema version (8 bytes, big-endian, as Pulsar's ``LongSchemaVersion``); -1: none."""
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1


def _int64_numpy(values: list[int]) -> np.ndarray:
    """Python ints as an int64 numpy array through a packed buffer: half the cost of converting each int."""
    import numpy as np
    return np.frombuffer(array("q", values), np.int64)


def _event_times(event_ms: np.ndarray, type_: pa.DataType) -> pa.Array:
    """Event times in microseconds; 0 (unset) becomes null."""
    import numpy as np
    import pyarrow as pa
    unset = event_ms == 0
    nulls = int(unset.sum())
    validity = pa.py_buffer(np.packbits(~unset, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(type_, len(event_ms), [validity, pa.py_buffer(event_ms * 1000)], null_count=nulls)
