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

from magnetar.spark.message_ids import encode_varint
from magnetar.spark.options import ConnectionOptions
from magnetar.spark.wire_session import BrokerLink, BrokerSessionError
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import compress
from magnetar.wire.frames import encode_payload_command, make_entry

T = pb.BaseCommand
_U32 = struct.Struct(">I")
_PAYLOAD_SIZE = b"\x18"
_SEQUENCE_ID = b"\x40"
_NULL_RECORD = _U32.pack(4) + b"\x18\x00\x48\x01"  # payload_size 0, null_value true
#: How long one wait for a send receipt lasts before the connection is asked whether it lives.
_RECEIPT_POLL_S = 30.0


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


class BatchEncoder:
    """Batch payloads from values: ``[size][SingleMessageMetadata][value]`` per row."""

    def __init__(self) -> None:
        self._heads: dict[int, bytes] = {}

    def _head(self, size: int) -> bytes:
        head = self._heads.get(size)
        if head is None:
            meta = _PAYLOAD_SIZE + encode_varint(size)
            head = self._heads[size] = _U32.pack(len(meta)) + meta
        return head

    def encode(self, values: list[bytes | None], last_sequence_id: int) -> bytes:
        """The payload of a batch of ``values`` (None: a null value) whose last row has ``last_sequence_id``."""
        heads, head = self._heads, self._head
        parts: list[bytes] = []
        append = parts.append
        for value in values[:-1]:
            if value is None:
                append(_NULL_RECORD)
                continue
            append(heads.get(len(value)) or head(len(value)))
            append(value)
        last = values[-1]
        meta = _PAYLOAD_SIZE + encode_varint(len(last) if last is not None else 0)
        meta += _SEQUENCE_ID + encode_varint(last_sequence_id) + (b"\x48\x01" if last is None else b"")
        parts += (_U32.pack(len(meta)), meta, last or b"")
        return b"".join(parts)


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
        frame = self._link.receive(_RECEIPT_POLL_S)
        if frame is None:
            return  # the send timeout is infinite, as for the official client's sink producers
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
