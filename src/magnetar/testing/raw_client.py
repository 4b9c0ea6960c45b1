"""A blocking, byte-level Pulsar protocol client for tests that must misbehave.

The official clients never send a wrong checksum, an oversized frame or a SEND for
a producer they did not create; tests of those paths drive the broker through this
class instead. It speaks plain frames over a socket and hands back every frame it
receives, undecoded entries included, so a test can check the bytes themselves.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import (
    PAYLOAD_COMMAND_TYPES,
    encode_command,
    encode_payload_command,
    make_entry,
    request_id_of,
)

T = pb.BaseCommand
_SIZES = struct.Struct(">II")
CLIENT_VERSION = "magnetar-raw-test"


@dataclass
class RawFrame:
    """One frame as received: the command, the bytes after it, and the frame's sizes."""

    command: pb.BaseCommand
    entry: bytes
    total_size: int
    command_size: int

    @property
    def type_name(self) -> str:
        return str(T.Type.Name(self.command.type))


@dataclass
class RawConnection:
    """One TCP connection to a broker; every read has a timeout."""

    host: str
    port: int
    timeout_s: float = 5.0
    #: SO_RCVBUF set before connecting (the window is fixed at the handshake): a small
    #: one makes a client that does not read push back on the broker at once
    receive_buffer: int | None = None
    sock: socket.socket = field(init=False)
    received: list[RawFrame] = field(default_factory=list, init=False)
    _buffer: bytearray = field(default_factory=bytearray, init=False)
    _queued: deque[RawFrame] = field(default_factory=deque, init=False)
    _closed_by_peer: bool = field(default=False, init=False)
    #: what is sent while corked, written at once when uncorked
    _corked: list[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        self.sock.settimeout(self.timeout_s)
        self.sock.connect((self.host, self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @classmethod
    def to_service(cls, service_url: str, timeout_s: float = 5.0,
                   receive_buffer: int | None = None) -> RawConnection:
        host, _, port = service_url.removeprefix("pulsar://").rpartition(":")
        return cls(host, int(port), timeout_s, receive_buffer)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        if self._corked is not None:
            self._corked.append(data)
        else:
            self.sock.sendall(data)

    @contextmanager
    def corked(self) -> Iterator[None]:
        """Everything sent inside goes out in one write, as a pipelining client's sends do,
        so the broker reads the frames together."""
        self._corked = []
        try:
            yield
        finally:
            data, self._corked = b"".join(self._corked), None
            self.sock.sendall(data)

    def send_command(self, cmd: pb.BaseCommand) -> None:
        self.send_bytes(encode_command(cmd))

    def send_payload(self, cmd: pb.BaseCommand, entry: bytes) -> None:
        self.send_bytes(encode_payload_command(cmd, entry))

    # -- reading ---------------------------------------------------------------
    def next_frame(self, timeout_s: float | None = None) -> RawFrame | None:
        """The next frame, or None when the peer closed the connection or time ran out."""
        if self._queued:
            return self._queued.popleft()
        return self._read_fresh(self.timeout_s if timeout_s is None else timeout_s)

    def _read_fresh(self, timeout_s: float) -> RawFrame | None:
        deadline = time.monotonic() + timeout_s
        while True:
            frame = self._parse_one()
            if frame is not None:
                self.received.append(frame)
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed_by_peer:
                return None
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            except ConnectionResetError:
                data = b""
            if not data:
                self._closed_by_peer = True
            self._buffer += data

    def _parse_one(self) -> RawFrame | None:
        if len(self._buffer) < 8:
            return None
        total_size, command_size = _SIZES.unpack_from(self._buffer)
        if len(self._buffer) < 4 + total_size:
            return None
        command = pb.BaseCommand()
        command.ParseFromString(bytes(self._buffer[8 : 8 + command_size]))
        entry = bytes(self._buffer[8 + command_size : 4 + total_size])
        del self._buffer[: 4 + total_size]
        return RawFrame(command, entry, total_size, command_size)

    def read_until(self, match: Callable[[RawFrame], bool], timeout_s: float | None = None,
                   answer_pings: bool = True, what: str = "a matching frame") -> RawFrame:
        """The first frame ``match`` accepts; the frames before it stay queued for later reads."""
        for index, queued in enumerate(self._queued):
            if match(queued):
                del self._queued[index]
                return queued
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while (remaining := deadline - time.monotonic()) > 0:
            frame = self._read_fresh(remaining)
            if frame is None:
                break
            if match(frame):
                return frame
            if answer_pings and frame.command.type == T.PING:
                self.send_command(pong())
            else:
                self._queued.append(frame)
        state = "was closed by the broker" if self._closed_by_peer else "timed out"
        seen = ", ".join(f.type_name for f in self._queued) or "nothing"
        raise AssertionError(f"expected {what}; the connection {state}; queued: {seen}")

    def expect(self, type_: int, timeout_s: float | None = None, answer_pings: bool = True) -> RawFrame:
        """The next frame of ``type_``."""
        return self.read_until(lambda f: f.command.type == type_, timeout_s, answer_pings,
                               what=str(T.Type.Name(type_)))

    def expect_reply(self, request_id: int, type_: int, timeout_s: float | None = None) -> RawFrame:
        """The reply to a request: ``type_``, or fail with the broker's ERROR."""
        def is_reply(frame: RawFrame) -> bool:
            return frame.command.type in (type_, T.ERROR) and request_id_of(frame.command) == request_id

        frame = self.read_until(is_reply, timeout_s, what=f"{T.Type.Name(type_)} for request {request_id}")
        if frame.command.type == T.ERROR and type_ != T.ERROR:
            err = frame.command.error
            raise AssertionError(f"broker answered ERROR {pb.ServerError.Name(err.error)}: {err.message}")
        return frame

    def frames_for(self, duration_s: float, answer_pings: bool = True) -> list[RawFrame]:
        """Every frame that arrives within ``duration_s`` (fewer if the peer closes)."""
        deadline = time.monotonic() + duration_s
        frames = list(self._queued)
        self._queued.clear()
        while (remaining := deadline - time.monotonic()) > 0 and not self._closed_by_peer:
            frame = self._read_fresh(remaining)
            if frame is None:
                continue
            if answer_pings and frame.command.type == T.PING:
                self.send_command(pong())
            frames.append(frame)
        return frames

    def wait_closed(self, timeout_s: float) -> bool:
        """True once the broker closes the connection within the time (frames read meanwhile are kept)."""
        deadline = time.monotonic() + timeout_s
        while not self._closed_by_peer and (remaining := deadline - time.monotonic()) > 0:
            frame = self._read_fresh(remaining)
            if frame is not None:
                self._queued.append(frame)
        return self._closed_by_peer

    @property
    def closed_by_peer(self) -> bool:
        return self._closed_by_peer

    # -- conversations -----------------------------------------------------------
    def handshake(self, protocol_version: int = 20) -> pb.CommandConnected:
        self.send_command(connect(protocol_version))
        return self.expect(T.CONNECTED).command.connected

    def create_producer(self, topic: str, producer_id: int = 0, request_id: int = 1,
                        **fields: object) -> pb.CommandProducerSuccess:
        self.send_command(producer(topic, producer_id, request_id, **fields))
        frame = self.expect_reply(request_id, T.PRODUCER_SUCCESS)
        return frame.command.producer_success

    def subscribe(self, topic: str, subscription: str, consumer_id: int = 0, request_id: int = 1,
                  **fields: object) -> None:
        self.send_command(subscribe(topic, subscription, consumer_id, request_id, **fields))
        self.expect_reply(request_id, T.SUCCESS)

    def send_message(self, producer_id: int, sequence_id: int, payload: bytes,
                     producer_name: str = "raw", corrupt_checksum: bool = False,
                     metadata: pb.MessageMetadata | None = None, **send_fields: object) -> bytes:
        """Send one SEND frame; returns the entry bytes it carried."""
        meta = metadata if metadata is not None else pb.MessageMetadata()
        if not meta.HasField("producer_name"):
            meta.producer_name = producer_name
        if not meta.HasField("sequence_id"):
            meta.sequence_id = sequence_id
        if not meta.HasField("publish_time"):
            meta.publish_time = int(time.time() * 1000)
        entry = make_entry(meta, payload)
        if corrupt_checksum:
            entry = entry[:2] + bytes([entry[2] ^ 0xFF]) + entry[3:]
        cmd = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(
            producer_id=producer_id, sequence_id=sequence_id, **send_fields))  # type: ignore[arg-type]
        self.send_payload(cmd, entry)
        return entry


# -- command builders for the client side ----------------------------------------------------
def connect(protocol_version: int = 20) -> pb.BaseCommand:
    body = pb.CommandConnect(client_version=CLIENT_VERSION, protocol_version=protocol_version,
                             auth_method_name="none")
    return pb.BaseCommand(type=T.CONNECT, connect=body)


def ping() -> pb.BaseCommand:
    return pb.BaseCommand(type=T.PING, ping=pb.CommandPing())


def pong() -> pb.BaseCommand:
    return pb.BaseCommand(type=T.PONG, pong=pb.CommandPong())


def producer(topic: str, producer_id: int, request_id: int, **fields: object) -> pb.BaseCommand:
    body = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=request_id,
                              **fields)  # type: ignore[arg-type]
    return pb.BaseCommand(type=T.PRODUCER, producer=body)


def subscribe(topic: str, subscription: str, consumer_id: int, request_id: int,
              **fields: object) -> pb.BaseCommand:
    fields.setdefault("subType", pb.CommandSubscribe.Exclusive)
    body = pb.CommandSubscribe(topic=topic, subscription=subscription, consumer_id=consumer_id,
                               request_id=request_id, **fields)  # type: ignore[arg-type]
    return pb.BaseCommand(type=T.SUBSCRIBE, subscribe=body)


def flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    return pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits))


def lookup(topic: str, request_id: int) -> pb.BaseCommand:
    body = pb.CommandLookupTopic(topic=topic, request_id=request_id, authoritative=False,
                                 advertised_listener_name="")
    return pb.BaseCommand(type=T.LOOKUP, lookupTopic=body)


def partitioned_metadata(topic: str, request_id: int) -> pb.BaseCommand:
    body = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id)
    return pb.BaseCommand(type=T.PARTITIONED_METADATA, partitionMetadata=body)


def ack(consumer_id: int, ledger_id: int, entry_id: int, cumulative: bool = False) -> pb.BaseCommand:
    body = pb.CommandAck(consumer_id=consumer_id,
                         ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
                         message_id=[pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)])
    return pb.BaseCommand(type=T.ACK, ack=body)


def is_payload(frame: RawFrame) -> bool:
    return frame.command.type in PAYLOAD_COMMAND_TYPES
