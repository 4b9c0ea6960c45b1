"""The effectively-once sink: retried tasks and restarted queries add no duplicates.

It leans on the broker's producer deduplication (Pulsar's, by producer name and
sequence id) and makes every choice that could differ between two attempts at the
same rows deterministic:

* **Producer names** — ``<prefix>-<query id or write id>-<Spark partition id>``: a
  retried task or a replayed micro-batch publishes under the name the first attempt
  used, and the broker remembers how far that name got.
* **Sequence ids** — ``(epoch << 32) + row``, where the epoch is the micro-batch id
  (0 for a batch write) and ``row`` the 1-based position in the Spark partition. Ids
  grow across micro-batches, and a replay repeats them exactly.
* **Routing** — a keyed row goes to ``murmur3_32(key) % partitions`` (Pulsar's
  ``Murmur3_32Hash``), a keyless one to ``(row + partition id) % partitions``; no
  random round-robin start, so a replayed row lands on the same partition.

A replay must also never send a batch that *straddles* what an earlier attempt
stored. The broker judges a batch by its sequence ids as a whole (the official
Python client does not send ``highest_sequence_id``; the broker reads the last id
from the batch): a batch that is all old is dropped, all new is stored, but one
that is half old is either stored whole, its first messages a second time (Magnetar),
or dropped whole, its new messages lost (Pulsar, apache/pulsar#6273). Spark makes
that case common: when an upstream stage fails, the writer sees its input end early
but cleanly and flushes a partial batch at an arbitrary row. So each producer, once
connected, learns from the broker the last sequence id it has under its name
(``last_sequence_id``, which PRODUCER_SUCCESS carries) and skips the rows at or below
it. What it sends then starts after everything already stored, and broker
deduplication remains the backstop for what the client itself re-sends after a
reconnection.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from magnetar.spark.options import SinkOptions, normalise_topic
from magnetar.spark.rest import AdminClient, base_topic
from magnetar.spark.schema import EVENT_TIME, KEY, MESSAGE_PROPERTIES, TOPIC, VALUE

if TYPE_CHECKING:
    import pyarrow as pa

    from magnetar.spark.record_encoding import RecordEncoder
    from magnetar.spark.wire_producer import BatchProducer

    #: A batch's values: Python objects for the official client, an Arrow column for protocol-level producers.
    _Values: TypeAlias = list[bytes | None] | pa.Array

log = logging.getLogger("magnetar.spark")

ROW_BITS = 32
MAX_ROWS_PER_EPOCH = (1 << ROW_BITS) - 1
MAX_EPOCH = (1 << (63 - ROW_BITS)) - 1
DEFAULT_BATCH_MESSAGES = 1000
#: The official client's default batchingMaxBytes.
DEFAULT_BATCH_BYTES = 128 * 1024
#: Batches close when full rather than on a timer (the task flushes its last one): fewer,
#: larger entries cost the broker less per message, and readers too.
DEFAULT_BATCH_DELAY_MS = 100
#: Room for several full batches per producer while earlier ones wait for their fsync.
DEFAULT_MAX_PENDING_MESSAGES = 10_000
#: Every this many messages per producer one reports back (see PartitionWriter).
TRACK_EVERY = 1000
#: Messages above this size always report back: an oversized batch fails alone.
LARGE_MESSAGE = 64 * 1024
#: How long a retry waits for the previous attempt's producer to be released.
PRODUCER_BUSY_WAIT_S = 90.0
STREAMING_QUERY_ID = "sql.streaming.queryId"
STREAMING_BATCH_ID = "streaming.sql.batchId"
_P = TypeVar("_P")


class MagnetarSinkError(RuntimeError):
    """The sink cannot deliver its effectively-once promise, or a send failed."""


@dataclass
class MagnetarCommitMessage(WriterCommitMessage):
    """What one task did: ``rows`` seen, of which ``duplicates`` an earlier attempt had
    already stored (skipped); ``sent`` per topic partition."""

    partition_id: int
    producer_name: str
    epoch: int
    rows: int
    duplicates: int
    sent: dict[str, int] = field(default_factory=dict)


def sequence_id(epoch: int, row: int) -> int:
    """The sequence id of the ``row``-th row (1-based) of a Spark partition in an epoch."""
    if not 0 <= epoch <= MAX_EPOCH:
        raise MagnetarSinkError(f"epoch {epoch} out of range 0..{MAX_EPOCH}")
    if not 1 <= row <= MAX_ROWS_PER_EPOCH:
        raise MagnetarSinkError(f"a Spark partition may write at most {MAX_ROWS_PER_EPOCH} rows per batch")
    return (epoch << ROW_BITS) + row


def producer_name(prefix: str, run_id: str, partition_id: int) -> str:
    return f"{prefix}-{run_id}-{partition_id}"


def key_partition(key: str, partitions: int) -> int:
    """Pulsar's Murmur3_32Hash routing: the same key always reaches the same partition."""
    import mmh3
    return (mmh3.hash(key.encode("utf-8"), 0) & 0x7FFFFFFF) % partitions


def check_deduplication(options: SinkOptions, topic: str) -> None:
    """Refuse to write where the broker would not drop replayed messages."""
    if not options.require_deduplication:
        return
    with AdminClient(options.connection) as admin:
        setting = admin.deduplication(topic)
    if not setting.enabled:
        tenant, namespace = topic.partition("://")[2].split("/")[:2]
        raise MagnetarSinkError(
            f"deduplication is disabled for {base_topic(topic)} ({setting.decided_by}), so retried tasks "
            f"would publish duplicates. Enable it: POST {options.connection.admin_url}/admin/v2/namespaces/"
            f"{tenant}/{namespace}/deduplication with body true (magnetar admin namespaces "
            f"set-deduplication {tenant}/{namespace} --enable), or set brokerDeduplicationEnabled=true on the "
            "broker; or pass requireDeduplication=false to write at-least-once")


# -- Spark-facing writers -----------------------------------------------------------------------

class MagnetarBatchWriter(DataSourceArrowWriter):
    """``df.write.format("magnetar")``; ``writeId`` makes a re-run of the same job add nothing."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.run_id = options.write_id or uuid.uuid4().hex[:16]
        if options.topic is not None:
            check_deduplication(options, options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagnetarCommitMessage:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        name = producer_name(self.options.producer_name_prefix, self.run_id, ctx.partitionId())
        return PartitionWriter(self.options, name, epoch=0, partition_id=ctx.partitionId()).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        _log_commit(f"write {self.run_id}", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        log.warning("write %s aborted; the messages already published stay, and re-running it with "
                    "writeId=%s publishes only what is missing", self.run_id, self.run_id)


class MagnetarStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("magnetar")``: producer names from the checkpointed query id, epochs from batch ids."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        if options.topic is not None:
            check_deduplication(options, options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagnetarCommitMessage:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        query_id = ctx.getLocalProperty(STREAMING_QUERY_ID)
        batch_id = ctx.getLocalProperty(STREAMING_BATCH_ID)
        if not query_id or batch_id is None:
            raise MagnetarSinkError("the streaming sink found no query id / batch id in the task context; "
                                    "it runs only under Structured Streaming micro-batches")
        name = producer_name(self.options.producer_name_prefix, query_id, ctx.partitionId())
        return PartitionWriter(self.options, name, epoch=int(batch_id),
                               partition_id=ctx.partitionId()).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        _log_commit(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        log.warning("micro-batch %d aborted; its replay publishes only what is missing", batchId)


def _log_commit(what: str, messages: list[WriterCommitMessage | None]) -> None:
    done = [m for m in messages if isinstance(m, MagnetarCommitMessage)]
    log.info("%s: %d rows published, %d already stored by an earlier attempt, %d partitions", what,
             sum(m.rows - m.duplicates for m in done), sum(m.duplicates for m in done), len(done))


# -- executor side ------------------------------------------------------------------------------

class PartitionWriter:
    """Publishes one Spark partition's rows; independent of Spark so it can be tested alone.

    A Python callback per message costs a GIL hand-off from the client's I/O thread
    and cuts throughput threefold, so only every ``TRACK_EVERY``-th message, every
    large message and (through ``flush()``) the last one report back. That catches
    every failure when the send timeout is infinite, the sink's default and Pulsar's
    advice for deduplicating producers: failures then come from the producer being
    closed or fenced, which fails every later send as well, or from an oversized
    message, which is tracked. With a finite ``pulsar.producer.sendTimeoutMs`` a
    timeout can hit messages between tracked ones, so every message is tracked.
    """

    def __init__(self, options: SinkOptions, name: str, *, epoch: int, partition_id: int) -> None:
        import pulsar
        self.options = options
        self.name = name
        self.epoch = epoch
        self.partition_id = partition_id
        self._ok = pulsar.Result.Ok
        self._lock = threading.Lock()
        self._failures: list[str] = []
        self._already_stored = 0
        timeout_ms = options.producer_kwargs().get("send_timeout_millis", 0)
        self._track_every = 1 if timeout_ms else TRACK_EVERY
        self._encoder: RecordEncoder | None = None

    def write(self, batches: Iterator[pa.RecordBatch]) -> MagnetarCommitMessage:
        # A task without rows opens no producer: it leaves no trace on the broker.
        rows = (batch for batch in batches if batch.num_rows)
        first = next(rows, None)
        if first is None:
            return MagnetarCommitMessage(self.partition_id, self.name, self.epoch, 0, 0, {})
        targets: _Targets = _WireTargets(self.options, self.name) if self._fits_wire(first.schema) else \
            _Targets(self.options.connection.new_client(), self.options, self.name)
        try:
            count = self._send_all(chain([first], rows), targets)
            targets.flush()
            self._raise_failures()
            return MagnetarCommitMessage(self.partition_id, self.name, self.epoch, count,
                                         self._already_stored, targets.sent_counts())
        finally:
            targets.close()

    def _fits_wire(self, schema: pa.Schema) -> bool:
        """Whether every row can go through protocol-level producers: values only, to the
        ``topic`` option, over a connection and with producer settings they honour."""
        from magnetar.spark.wire_session import supports
        settings = self.options.producer_settings
        # Rows encoded with the topic's schema go through the official client, whose PRODUCER
        # carries the schema for the broker to check.
        return schema.names == [VALUE] and self.options.topic is not None and self.options.topic_schema is None \
            and supports(self.options.connection) and not int(settings.get("sendTimeoutMs", "0")) \
            and settings.get("batchingEnabled", "true") != "false"

    def _send_all(self, batches: Iterator[pa.RecordBatch], targets: _Targets) -> int:
        row = 0
        wire = isinstance(targets, _WireTargets)
        for batch in batches:
            if row + batch.num_rows > MAX_ROWS_PER_EPOCH:
                sequence_id(self.epoch, row + batch.num_rows)
            if self.options.topic_schema is not None:
                batch = self._record_encoder(batch).encode(batch)
            if wire and self.options.topic is not None:
                self._send_plain(batch.column(VALUE), targets.open(self.options.topic), row)
            elif (columns := _columns(batch)).plain and self.options.topic is not None:
                self._send_plain(columns.values, targets.open(self.options.topic), row)
            else:
                self._send_rows(columns, targets, row)
            row += batch.num_rows
            if self._failures:
                self._raise_failures()
        return row

    def _record_encoder(self, batch: pa.RecordBatch) -> RecordEncoder:
        """The encoder of the topic's AVRO or JSON schema, made for the first batch's columns."""
        if self._encoder is None:
            from magnetar.spark.record_encoding import RecordEncoder
            assert self.options.topic_schema is not None
            self._encoder = RecordEncoder(self.options.topic_schema, batch.schema.names)
        return self._encoder

    def _send_plain(self, values: _Values, targets: list[_Target], row: int) -> None:
        """Rows with a value only, none large, to the ``topic`` option: one tight loop per target.

        Keyless row ``r`` goes to partition ``(r + partition id) % n``, so each target's rows
        are every n-th row of the batch; sending them target by target keeps each producer's
        sequence ids increasing, all that deduplication needs, and leaves the loop nothing
        to decide per row.
        """
        n = len(targets)
        base = sequence_id(self.epoch, 1) - 1 + row  # the sequence id of the batch's row i is base + 1 + i
        for k, target in enumerate(targets):
            first = (k - row - 1 - self.partition_id) % n
            if first >= len(values):
                continue
            mine = values[first::n] if n > 1 else values
            seq = base + 1 + first
            if target.stored_up_to >= seq:
                stored = min(len(mine), (target.stored_up_to - seq) // n + 1)
                self._already_stored += stored
                mine = mine[stored:]
                seq += stored * n
            self._send_values(target, mine, seq, n)

    def _send_values(self, target: _Target, values: _Values, first_seq: int, step: int) -> None:
        """Send ``values`` with sequence ids ``first_seq``, ``first_seq + step``, ...: five calls
        into the client per message and nothing else, or (an Arrow column) whole batches over
        the protocol."""
        if not isinstance(values, list):
            assert target.batches is not None, "Arrow columns go to protocol-level producers"
            self._send_batches(target, target.batches, values, first_seq, step)
            return
        import _pulsar
        # The official client's message builder, as Producer.send_async(..., sequence_id=...) uses
        # it, minus the wrapper's per-argument type checks (a third of the per-message cost).
        builder, send, callback, every = _pulsar.MessageBuilder, target.send, self._on_sent, self._track_every
        sent = target.sent
        for value, seq in zip(values, range(first_seq, first_seq + step * len(values), step), strict=True):
            sent += 1
            send(builder().content(value).sequence_id(seq).build(), callback if sent % every == 0 else None)
        target.sent = sent

    def _send_batches(self, target: _Target, producer: BatchProducer, values: pa.Array, first_seq: int,
                      step: int) -> None:
        """Cut ``values`` into batches of at most ``batchingMaxMessages`` rows and ``batchingMaxBytes``
        bytes (a larger row travels alone) and send each as one entry."""
        from magnetar.spark.wire_producer import EncodedRecords
        settings = self.options.producer_settings
        max_messages = int(settings.get("batchingMaxMessages", DEFAULT_BATCH_MESSAGES))
        max_bytes = int(settings.get("batchingMaxBytes", DEFAULT_BATCH_BYTES))
        records = EncodedRecords(values)
        start = 0
        while start < len(records):
            stop = records.cut(start, max_messages, max_bytes)
            first, last = first_seq + start * step, first_seq + (stop - 1) * step
            producer.send(records.batch(start, stop, last), stop - start, first, last)
            start = stop
        target.sent += len(records)

    def _send_rows(self, columns: _Columns, targets: _Targets, row: int) -> None:
        """Any rows: keys, properties, event times, per-row topics, null or large values."""
        import _pulsar
        base = sequence_id(self.epoch, 1) - 1
        callback, track_every, default_topic = self._on_sent, self._track_every, self.options.topic
        builder = _pulsar.MessageBuilder
        values, keys, props, events, topics = columns.values, columns.keys, columns.props, columns.events, \
            columns.topics
        for i in range(len(values)):
            row += 1
            key = keys[i] if keys is not None else None
            topic = (topics[i] if topics is not None else None) or default_topic
            if topic is None:
                raise MagnetarSinkError(f"row {row} of Spark partition {self.partition_id} has no "
                                        f"{TOPIC} and the 'topic' option is not set")
            target = targets.route(topic, key, row + self.partition_id)
            seq = base + row
            if seq <= target.stored_up_to:
                self._already_stored += 1
                continue
            value = values[i]
            target.sent += 1
            tracked = target.sent % track_every == 0 or (value is not None and len(value) > LARGE_MESSAGE)
            message = builder()
            if value is None:
                message.set_null_value()
            else:
                message.content(value)
            if key:
                message.partition_key(key)
            if props is not None and props[i]:
                for name, text in props[i].items():
                    message.property(name, text)
            if events is not None and events[i]:
                message.event_timestamp(events[i])
            message.sequence_id(seq)
            target.send(message.build(), callback if tracked else None)

    def _on_sent(self, result: Any, message_id: Any) -> None:
        if result != self._ok:
            with self._lock:
                self._failures.append(str(result))

    def _raise_failures(self) -> None:
        if self._failures:
            raise MagnetarSinkError(f"producer {self.name}: sends failed ({self._failures[0]}); Spark retries "
                                    "the task, which publishes only what the broker does not have yet")


@dataclass
class _Columns:
    """The sink's columns of one Arrow batch as Python lists, converted once per batch."""

    values: list[Any]
    keys: list[Any] | None
    props: list[Any] | None
    events: list[Any] | None
    topics: list[Any] | None
    #: Only values, none null or large: what the fast path sends.
    plain: bool


def _columns(batch: pa.RecordBatch) -> _Columns:
    import pyarrow as pa
    import pyarrow.compute as pc
    names = batch.schema.names

    def col(name: str) -> pa.Array | None:
        return batch.column(names.index(name)) if name in names else None

    value = col(VALUE)
    assert value is not None
    if pa.types.is_string(value.type) or pa.types.is_large_string(value.type):
        value = pc.cast(value, pa.binary())
    values = value.to_pylist()
    key_col = col(KEY)
    keys = None
    if key_col is not None:
        if pa.types.is_binary(key_col.type) or pa.types.is_large_binary(key_col.type):
            keys = [k.decode("utf-8") if k is not None else None for k in key_col.to_pylist()]
        else:
            keys = key_col.to_pylist()
    prop_col = col(MESSAGE_PROPERTIES)
    props = [dict(p) if p else None for p in prop_col.to_pylist()] if prop_col is not None else None
    event_col = col(EVENT_TIME)
    events = None
    if event_col is not None:
        micros = pc.cast(event_col, pa.timestamp("us")).cast(pa.int64()).to_pylist()
        events = [m // 1000 if m is not None else None for m in micros]
    topic_col = col(TOPIC)
    topics = [normalise_topic(t) if t else None for t in topic_col.to_pylist()] if topic_col is not None else None
    plain = keys is None and props is None and events is None and topics is None and value.null_count == 0 and \
        (pc.max(pc.binary_length(value)).as_py() or 0) <= LARGE_MESSAGE
    return _Columns(values, keys, props, events, topics, plain)


@dataclass
class _Target:
    """One topic partition's producer and the last sequence id the broker had stored under its name."""

    producer: Any
    topic: str
    stored_up_to: int
    #: ``send_async(message, callback)`` of the producer's C++ binding.
    send: Any
    sent: int = 0
    #: Set instead of ``send`` for a protocol-level producer.
    batches: BatchProducer | None = None


class _Targets:
    """Producers per target topic partition, all under the task's one producer name."""

    def __init__(self, client: Any, options: SinkOptions, name: str) -> None:
        self.client = client
        self.options = options
        self.name = name
        self._by_topic: dict[str, list[_Target]] = {}

    def route(self, topic: str, key: str | None, spread: int) -> _Target:
        targets = self._by_topic.get(topic)
        if targets is None:
            targets = self.open(topic)
        n = len(targets)
        return targets[0 if n == 1 else key_partition(key, n) if key else spread % n]

    def open(self, topic: str) -> list[_Target]:
        """The producers of ``topic``'s partitions, created on first use."""
        targets = self._by_topic.get(topic)
        if targets is not None:
            return targets
        if topic != self.options.topic:
            check_deduplication(self.options, topic)
        targets = []
        for partition in self.client.get_topic_partitions(topic):
            producer = self._create(partition)
            targets.append(_Target(producer, partition, producer.last_sequence_id(),
                                   producer._producer.send_async))
        self._by_topic[topic] = targets
        return targets

    def _create(self, topic: str) -> Any:
        import pulsar
        kwargs: dict[str, Any] = {
            "batching_enabled": True,
            "batching_max_messages": DEFAULT_BATCH_MESSAGES,
            "batching_max_publish_delay_ms": DEFAULT_BATCH_DELAY_MS,
            "max_pending_messages": DEFAULT_MAX_PENDING_MESSAGES,
            "block_if_queue_full": True,
            "send_timeout_millis": 0,  # infinite, as Pulsar advises for deduplicating producers
        }
        kwargs.update(self.options.producer_kwargs())
        if self.options.topic_schema is not None and base_topic(topic) == self.options.topic:
            from magnetar.spark.record_encoding import producer_schema
            kwargs["schema"] = producer_schema(self.options.topic_schema)
        return self._while_busy(topic, pulsar.ProducerBusy,
                                lambda: self.client.create_producer(topic, producer_name=self.name, **kwargs))

    def _while_busy(self, topic: str, busy: type[Exception], create: Callable[[], _P]) -> _P:
        """``create()``, again while the previous attempt of this task still holds the producer
        name (until the broker notices it left)."""
        deadline = time.monotonic() + PRODUCER_BUSY_WAIT_S
        delay_s = 0.1
        while True:
            try:
                return create()
            except busy:
                if time.monotonic() > deadline:
                    raise MagnetarSinkError(
                        f"producer name {self.name} is still in use on {topic} after "
                        f"{PRODUCER_BUSY_WAIT_S:.0f}s; another attempt of this task is still writing") from None
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)

    def flush(self) -> None:
        for targets in self._by_topic.values():
            for target in targets:
                target.producer.flush()

    def sent_counts(self) -> dict[str, int]:
        return {t.topic: t.sent for targets in self._by_topic.values() for t in targets if t.sent}

    def close(self) -> None:
        self.client.close()


class _WireTargets(_Targets):
    """Protocol-level producers, one per partition of the ``topic`` option (the plain case)."""

    def __init__(self, options: SinkOptions, name: str) -> None:
        super().__init__(None, options, name)

    def open(self, topic: str) -> list[_Target]:
        from magnetar.spark.wire_producer import BatchProducer, ProducerBusyError, topic_partitions
        targets = self._by_topic.get(topic)
        if targets is not None:
            return targets
        settings = self.options.producer_settings
        pending = int(settings.get("maxPendingMessages", DEFAULT_MAX_PENDING_MESSAGES))
        compression = settings.get("compressionType", "NONE").strip().upper()
        targets = []
        for partition in topic_partitions(self.options.connection, topic):
            def create(p: str = partition) -> BatchProducer:
                return BatchProducer(self.options.connection, p, self.name, max_pending_messages=pending,
                                     compression=compression)
            producer = self._while_busy(partition, ProducerBusyError, create)
            targets.append(_Target(producer, partition, producer.last_sequence_id, None, batches=producer))
        self._by_topic[topic] = targets
        return targets

    def close(self) -> None:
        for targets in self._by_topic.values():
            for target in targets:
                target.producer.close()

