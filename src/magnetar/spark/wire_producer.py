"""A named producer at the protocol level that sends batches the sink encodes from Arrow columns.

Through the official client every row costs a message builder and a ``send_async``
call, about six microseconds. Here the sink builds each batch payload itself: a row is
its value and a few cached header bytes, and a thousand rows travel as one SEND. The
batch metadata carries ``highest_sequence_id`` (and the last record its own
``sequence_id``), so Pulsar's and Magnetar's deduplication judge the batch by its last
row as they do the official client's batches. Only the sink's plain case goes this way
(values only, to the ``topic`` option): see :class:`magnetar.spark.sink.PartitionWriter`.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

from magnetar.spark.message_ids import encode_varint
from magnetar.spark.options import ConnectionOptions
from magnetar.spark.wire_session import BrokerLink, BrokerSessionError
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress
from magnetar.wire.frames import encode_payload_command, make_entry

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

T = pb.BaseCommand
_U32 = struct.Struct(">I")
_PAYLOAD_SIZE = b"\x18"
_SEQUENCE_ID = b"\x40"
#: How long one wait for a send receipt lasts before the connection is asked whether it lives.
_RECEIPT_POLL_S = 30.0
#: How long a task waits for a due send receipt before it fails:
#: a broker that stops answering must not hold a task for ever. Its retry sends the same
#: sequence ids under the same producer name, so deduplication keeps the write effectively once.
RECEIPT_SILENCE_LIMIT_S = 120.0


class ProducerBusyError(BrokerSessionError):
    """Another connection still holds the producer name (a previous attempt of the task)."""


def topic_partitions(connection: ConnectionOptions, topic: str) -> list[str]:
    """The partitions of ``topic`` (itself when it is not partitioned), as the client would list them."""
    link = BrokerLink(connection, topic, lookup=False)
    try:
        request = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=link.next_request())
        answer = link.request(T(type=T.PARTITIONED_METADATA, partitionMetadata=request),
                              "PARTITIONED_METADATA_RESPONSE").partitionMetadataResponse
    finally:
        link.close()
    if answer.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
        raise BrokerSessionError(f"partitions of {topic}: {answer.message}", answer.error)
    if answer.partitions <= 0:
        return [topic]
    return [f"{topic}-partition-{i}" for i in range(answer.partitions)]


class EncodedRecords:
    """Batch records of Arrow values, ``[size:4][SingleMessageMetadata][value]`` each, laid out
    by numpy in one buffer without a Python object per row.

    Record ``k`` spans ``offsets[k]:offsets[k + 1]`` of ``data``; its metadata carries the payload
    size (and the null flag), not its sequence id: only the last record of a batch needs one,
    and :meth:`batch` writes that record itself.
    """

    def __init__(self, values: pa.Array) -> None:
        import pyarrow as pa
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.large_binary() if pa.types.is_large_string(values.type) else pa.binary())
        self.values = values
        lengths, value_bytes = _value_bytes(values)
        if len(values) and not values.null_count and lengths.min() == lengths.max():
            self._lay_out_uniform(len(values), int(lengths[0]), value_bytes)
        else:
            self._lay_out_mixed(values.is_null().to_numpy(zero_copy_only=False), lengths, value_bytes)

    def _lay_out_mixed(self, nulls: npt.NDArray[np.bool_], lengths: npt.NDArray[np.int64],
                       value_bytes: npt.NDArray[np.uint8]) -> None:
        """Headers of varying length: built as rows of twelve bytes, then packed between the values."""
        import numpy as np
        n = len(lengths)
        # Columns: meta length (0..3), payload size tag (4) and varint (5..9), null flag (10, 11).
        varint_len = np.ones(n, np.int64)
        for j in range(1, 5):
            varint_len += lengths >= 1 << (7 * j)
        head = np.zeros((n, 12), np.uint8)
        head[:, 3] = 1 + varint_len + 2 * nulls
        head[:, 4] = 0x18
        used = np.zeros((n, 12), bool)
        used[:, :5] = True
        for j in range(5):
            head[:, 5 + j] = (lengths >> (7 * j)) & 0x7F | ((varint_len > j + 1).astype(np.int64) << 7)
            used[:, 5 + j] = varint_len > j
        head[:, 10], head[:, 11] = 0x48, 0x01
        used[:, 10] = used[:, 11] = nulls
        self.offsets = np.zeros(n + 1, np.int64)
        np.cumsum(used.sum(axis=1) + lengths, out=self.offsets[1:])
        self.data = np.empty(int(self.offsets[-1]), np.uint8)
        at = (self.offsets[:-1, None] + np.cumsum(used, axis=1) - 1)[used]
        self.data[at] = head[used]
        is_value = np.ones(len(self.data), bool)
        is_value[at] = False
        self.data[is_value] = value_bytes

    def _lay_out_uniform(self, n: int, size: int, value_bytes: npt.NDArray[np.uint8]) -> None:
        """Values all of one size and none null (the common case): every record has the same
        header, so the records are the rows of a matrix."""
        import numpy as np
        meta = _PAYLOAD_SIZE + encode_varint(size)
        head = _U32.pack(len(meta)) + meta
        records = np.empty((n, len(head) + size), np.uint8)
        records[:, :len(head)] = np.frombuffer(head, np.uint8)
        records[:, len(head):] = value_bytes.reshape(n, size)
        self.data = records.reshape(-1)
        self.offsets = np.arange(n + 1, dtype=np.int64) * (len(head) + size)

    def __len__(self) -> int:
        return len(self.values)

    def batch(self, start: int, stop: int, last_sequence_id: int) -> bytes:
        """The payload of the batch of records ``start`` to ``stop`` (exclusive)."""
        last = self.values[stop - 1].as_py()
        meta = _PAYLOAD_SIZE + encode_varint(len(last) if last is not None else 0)
        meta += _SEQUENCE_ID + encode_varint(last_sequence_id) + (b"\x48\x01" if last is None else b"")
        body = self.data[self.offsets[start]:self.offsets[stop - 1]].data
        return b"".join((body, _U32.pack(len(meta)), meta, last or b""))

    def cut(self, start: int, max_messages: int, max_bytes: int) -> int:
        """Where the batch that begins at record ``start`` ends: at most ``max_messages`` records
        and ``max_bytes`` bytes, but at least one record."""
        import numpy as np
        stop = min(start + max_messages, len(self.values))
        fits = int(np.searchsorted(self.offsets, self.offsets[start] + max_bytes, side="right")) - 1
        return max(start + 1, min(stop, fits))


class BatchProducer:
    """One producer of one topic partition under a fixed name; ``last_sequence_id`` is what
    the broker had stored under that name when it connected (-1: nothing)."""

    def __init__(self, connection: ConnectionOptions, topic: str, name: str, *, max_pending_messages: int,
                 compression: str = "NONE") -> None:
        self.topic = topic
        self.name = name
        self.max_pending_messages = max_pending_messages
        #: ``compressionType`` (NONE, LZ4, ZLIB, ZSTD, SNAPPY) as the protocol's code.
        self.compression = pb.CompressionType.Value(compression)
        self._pending: list[int] = []  # messages per batch awaiting its receipt, oldest first
        self._pending_messages = 0
        self._link = BrokerLink(connection, topic)
        try:
            self.last_sequence_id = self._register()
        except BaseException:
            self._link.close()
            raise

    def _register(self) -> int:
        request = pb.CommandProducer(topic=self.topic, producer_id=1, request_id=self._link.next_request(),
                                     producer_name=self.name, user_provided_producer_name=True)
        try:
            answer = self._link.request(T(type=T.PRODUCER, producer=request), "PRODUCER_SUCCESS")
        except BrokerSessionError as error:
            if error.code == pb.ProducerBusy:
                raise ProducerBusyError(str(error), error.code) from None
            raise
        while answer.producer_success.HasField("producer_ready") and not answer.producer_success.producer_ready:
            answer = self._link.expect("PRODUCER_SUCCESS")  # queued behind an exclusive producer
        return answer.producer_success.last_sequence_id

    def send(self, payload: bytes, count: int, first_sequence_id: int, last_sequence_id: int) -> None:
        """Send one batch; blocks while more than ``max_pending_messages`` await their receipts."""
        meta = pb.MessageMetadata(producer_name=self.name, sequence_id=first_sequence_id,
                                  publish_time=int(time.time() * 1000), num_messages_in_batch=count,
                                  highest_sequence_id=last_sequence_id)
        if self.compression != pb.NONE:
            meta.compression = self.compression
            meta.uncompressed_size = len(payload)
            payload = compress(self.compression, payload)
        command = T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=first_sequence_id,
                                                     num_messages=count, highest_sequence_id=last_sequence_id))
        self._link.sock.sock.sendall(encode_payload_command(command, make_entry(meta, payload)))
        self._pending.append(count)
        self._pending_messages += count
        while self._pending_messages > self.max_pending_messages:
            self._await_receipt()

    def flush(self) -> None:
        while self._pending:
            self._await_receipt()

    def _await_receipt(self) -> None:
        silent_since = time.monotonic()
        frame = self._link.receive(_RECEIPT_POLL_S)
        while frame is None:
            # No send timeout, as for the official client's sink producers; but a broker that
            # answers nothing for this long has stopped answering.
            if time.monotonic() - silent_since >= RECEIPT_SILENCE_LIMIT_S:
                raise BrokerSessionError(f"no send receipt from the broker for {self.topic} within "
                                         f"{RECEIPT_SILENCE_LIMIT_S:.0f}s: the broker stopped answering; the "
                                         "task's retry sends again, deduplicated")
            frame = self._link.receive(_RECEIPT_POLL_S)
        command = frame[0]
        if command.type == T.SEND_RECEIPT:
            self._pending_messages -= self._pending.pop(0)
        elif command.type == T.SEND_ERROR:
            raise BrokerSessionError(f"send to {self.topic} failed: {pb.ServerError.Name(command.send_error.error)}"
                                     f": {command.send_error.message}", command.send_error.error)
        elif command.type in (T.CLOSE_PRODUCER, T.ERROR):
            raise BrokerSessionError(f"the broker closed producer {self.name} on {self.topic}")

    def close(self) -> None:
        try:
            self._link.request(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                producer_id=1, request_id=self._link.next_request())), "SUCCESS")
        except (OSError, BrokerSessionError):
            pass
        self._link.close()


def _value_bytes(values: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Each value's length (0 when null) and all values' bytes back to back, read from the
    Arrow buffers without a copy when no value is null."""
    import numpy as np
    import pyarrow as pa
    dense = values.fill_null(b"") if values.null_count else values
    _, offsets_buffer, data_buffer = dense.buffers()
    wide = pa.types.is_large_binary(dense.type)
    offsets = np.frombuffer(offsets_buffer, np.int64 if wide else np.int32)[dense.offset:dense.offset + len(dense) + 1]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    return np.diff(offsets).astype(np.int64), data[offsets[0]:offsets[-1]]
