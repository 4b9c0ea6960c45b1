"""A blocking connection that reads a topic's entries as stored, with Magnetar's own wire code.

The official client hands over one Python object per message and costs about four
microseconds a message in calls alone, which caps a Spark task far below what the
broker serves. Read at the protocol level, a batch entry of a thousand messages is one
frame: the executor splits it itself (:mod:`magnetar.spark.entry_decoding`) and the
per-message work is a few slices.

Scope: what a Reader needs and nothing more. Plain TCP or TLS (``pulsar+ssl://`` or
``useTls``, the trust and host-name settings of ``pulsar.client.*``), no authentication
or a token, topic lookup with redirects, one non-durable Exclusive subscription that
starts at a message id, flow permits, GET_LAST_MESSAGE_ID, PING. Connections whose
settings need more (TLS client certificates, other authentication plugins, a
listener name) are read with the official client instead: :func:`supports` says which.
Any failure ends the Spark task, whose retry reads the same range again.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlparse

from magnetar.spark.options import ConnectionOptions
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import encode_command

T = pb.BaseCommand
CLIENT_VERSION = "magnetar-spark"
PROTOCOL_VERSION = 21
_SIZES = struct.Struct(">II")
_MAX_REDIRECTS = 8
_U64 = (1 << 64) - 1
#: Size of a connection's read buffer (more only for a frame that needs more), and the least
#: room a read is given.
_READ_BUFFER = 1 << 20
_MIN_READ = 64 << 10
#: Settings this connection honours; any other ``pulsar.client.*`` setting sends the read
#: through the official client.
_HONOURED = frozenset({"operationTimeoutMs", "connectionTimeoutMs", "useTls", "tlsTrustCertsFilePath",
                       "tlsAllowInsecureConnection", "tlsHostnameVerificationEnable", "authPluginClassName",
                       "authParams", "numIoThreads", "numListenerThreads", "concurrentLookupRequest",
                       "statsIntervalSeconds"})


class _OwnershipMoving(Exception):
    """A lookup met a topic whose ownership is moving between brokers: look up again shortly."""


class BrokerSessionError(RuntimeError):
    """The broker refused a request or broke the connection; ``code`` is the ServerError, if any."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def supports(connection: ConnectionOptions) -> bool:
    """Whether a read over this connection can go through :class:`EntrySession`."""
    settings = connection.client_settings
    if any(key not in _HONOURED for key in settings):
        return False
    plugin = settings.get("authPluginClassName", "")
    return not plugin or plugin.rsplit(".", 1)[-1] == "AuthenticationToken"


@dataclass(frozen=True)
class ReceivedEntry:
    """One MESSAGE: the entry's position and its bytes as the producer wrote them."""

    ledger_id: int
    entry_id: int
    entry: bytes


class _Socket:
    """Frames in and out of one (optionally TLS) socket, with a deadline on every read."""

    def __init__(self, url: str, connection: ConnectionOptions, timeout_s: float) -> None:
        parsed = urlparse(url.split(",")[0])
        settings = connection.client_settings
        use_tls = parsed.scheme == "pulsar+ssl" or settings.get("useTls", "").lower() == "true"
        host, port = parsed.hostname or "localhost", parsed.port or (6651 if use_tls else 6650)
        raw = socket.create_connection((host, port), timeout=timeout_s)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if use_tls:
            context = ssl.create_default_context(cafile=settings.get("tlsTrustCertsFilePath") or None)
            context.check_hostname = settings.get("tlsHostnameVerificationEnable", "").lower() == "true"
            if settings.get("tlsAllowInsecureConnection", "").lower() == "true":
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            raw = context.wrap_socket(raw, server_hostname=host)
        self.sock = raw
        self.url = url
        #: Bytes read ahead: frames from ``_start`` to ``_end``, the last maybe partial; the
        #: socket is read straight into the room after them.
        self._buffer = bytearray(_READ_BUFFER)
        self._start = self._end = 0
        #: Bytes of the partial frame at ``_start`` once its header is in: room to make.
        self._wanted = 0

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def receive(self, timeout_s: float) -> tuple[pb.BaseCommand, bytes] | None:
        """The next frame (command, bytes after it), or None when ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        frame = self._parse()
        while frame is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._fill(remaining):
                return None
            frame = self._parse()
        return frame

    def _fill(self, timeout_s: float) -> bool:
        """Read what arrives within ``timeout_s`` after the frames held; False when nothing did."""
        self._make_room()
        self.sock.settimeout(timeout_s)
        try:
            with memoryview(self._buffer) as view:
                received = self.sock.recv_into(view[self._end:])
        except TimeoutError:
            return False
        if not received:
            raise BrokerSessionError(f"the broker at {self.url} closed the connection")
        self._end += received
        return True

    def _make_room(self) -> None:
        """Room for a read of a good size after the held bytes, and for the whole partial frame:
        the held bytes move to the front (a partial frame: little), and the buffer grows only
        for a frame larger than it."""
        buffer, held = self._buffer, self._end - self._start
        if not held:
            self._start = self._end = 0
        if len(buffer) - self._end >= _MIN_READ and len(buffer) - self._start >= self._wanted:
            return
        if self._start:
            buffer[:held] = bytes(buffer[self._start:self._end])
            self._start, self._end = 0, held
        room = max(_READ_BUFFER, self._wanted, held + _MIN_READ)
        if len(buffer) < room:
            buffer.extend(bytes(room - len(buffer)))

    def _parse(self) -> tuple[pb.BaseCommand, bytes] | None:
        offset = self._start
        if self._end - offset < 8:
            return None
        total, command_size = _SIZES.unpack_from(self._buffer, offset)
        end = offset + 4 + total
        if end > self._end:
            self._wanted = 4 + total
            return None
        with memoryview(self._buffer) as view:
            command = T.FromString(view[offset + 8:offset + 8 + command_size])
            rest = bytes(view[offset + 8 + command_size:end])
        self._start, self._wanted = end, 0
        return command, rest

    def close(self) -> None:
        self.sock.close()


class BrokerLink:
    """A connection to the broker that serves one topic (or, without ``lookup``, to the service
    URL's broker): handshake, lookup, requests.

    Frames the caller did not ask for while it waited for an answer (MESSAGE, SEND_RECEIPT)
    are kept in ``early`` for it, in order.
    """

    def __init__(self, connection: ConnectionOptions, topic: str, *, lookup: bool = True) -> None:
        self.connection = connection
        self.topic = topic
        self.timeout_s = max(1, int(connection.client_settings.get("operationTimeoutMs", "30000"))) / 1000
        self.early: deque[tuple[pb.BaseCommand, bytes]] = deque()
        self._request_id = 0
        self.sock = self._connect_to_owner() if lookup else self._open(connection.service_url)

    def _open(self, url: str) -> _Socket:
        sock = _Socket(url, self.connection, self.timeout_s)
        connect = pb.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        token = self._token()
        if token is not None:
            connect.auth_method_name = "token"
            connect.auth_data = token
        sock.send(T(type=T.CONNECT, connect=connect))
        while True:
            command = self.expect("CONNECTED", sock)
            if command.type == T.CONNECTED:
                return sock
            if command.type == T.AUTH_CHALLENGE:
                response = pb.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
                response.response.auth_method_name = "token"
                response.response.auth_data = token or b""
                sock.send(T(type=T.AUTH_RESPONSE, authResponse=response))
                continue
            sock.close()
            raise BrokerSessionError(f"connecting to {url}: unexpected {T.Type.Name(command.type)}")

    def _token(self) -> bytes | None:
        if not self.connection.client_settings.get("authPluginClassName"):
            return None
        header = self.connection.admin_headers().get("Authorization", "")
        return header.removeprefix("Bearer ").encode()

    def _connect_to_owner(self) -> _Socket:
        """Follow the broker's lookup answers to the broker that serves the topic.

        While the topic's ownership moves (the owner a lookup names does not answer: a broker
        of a cluster that stopped, whose topics move once its metadata-store session ends; or
        a broker answers ServiceNotReady), the lookup starts over from the service URL, as the
        official client's does, until ``operationTimeoutMs`` has passed."""
        deadline = time.monotonic() + self.timeout_s
        pause_s = 0.1
        while True:
            try:
                return self._follow_lookups()
            except _OwnershipMoving as moving:
                if time.monotonic() + pause_s > deadline:
                    raise BrokerSessionError(f"lookup of {self.topic}: {moving}, for {self.timeout_s:.0f}s "
                                             "(operationTimeoutMs)") from None
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 1.0)

    def _follow_lookups(self) -> _Socket:
        url = self.connection.service_url
        sock = self._open(url)
        authoritative = False
        for _ in range(_MAX_REDIRECTS):
            lookup = pb.CommandLookupTopic(topic=self.topic, request_id=self.next_request(),
                                           authoritative=authoritative)
            sock.send(T(type=T.LOOKUP, lookupTopic=lookup))
            answer = self.expect("LOOKUP_RESPONSE", sock).lookupTopicResponse
            if answer.response == pb.CommandLookupTopicResponse.Failed:
                sock.close()
                if answer.HasField("error") and answer.error == pb.ServiceNotReady:
                    raise _OwnershipMoving(f"{sock.url} answered ServiceNotReady ({answer.message})")
                raise BrokerSessionError(f"lookup of {self.topic} failed: {answer.message}")
            tls = url.startswith("pulsar+ssl") or self.connection.client_settings.get("useTls", "") == "true"
            target = (answer.brokerServiceUrlTls if tls else answer.brokerServiceUrl) or url
            if answer.response == pb.CommandLookupTopicResponse.Connect and \
                    (answer.proxy_through_service_url or target == url):
                return sock
            sock.close()
            url, authoritative = target, answer.authoritative
            try:
                sock = self._open(url)
            except OSError as exc:
                raise _OwnershipMoving(f"its owner {url} does not answer ({exc})") from None
            if answer.response == pb.CommandLookupTopicResponse.Connect:
                return sock
        sock.close()
        raise BrokerSessionError(f"lookup of {self.topic} redirected more than {_MAX_REDIRECTS} times")

    def next_request(self) -> int:
        self._request_id += 1
        return self._request_id

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.send(command)

    def request(self, command: pb.BaseCommand, what: str) -> pb.BaseCommand:
        self.sock.send(command)
        return self.expect(what)

    def expect(self, what: str, sock: _Socket | None = None) -> pb.BaseCommand:
        """The next answer: a command other than PING, MESSAGE or SEND_RECEIPT; an ERROR raises."""
        sock = sock or self.sock
        deadline = time.monotonic() + self.timeout_s
        while True:
            frame = sock.receive(max(0.0, deadline - time.monotonic()))
            if frame is None:
                raise BrokerSessionError(f"no {what} from {sock.url} within {self.timeout_s:.0f}s")
            command = frame[0]
            if command.type in _ASYNCHRONOUS:
                self.early.append(frame)
            elif not self.answer_ping(command, sock):
                if command.type == T.ERROR:
                    raise BrokerSessionError(f"{self.topic}: {pb.ServerError.Name(command.error.error)}: "
                                             f"{command.error.message}", command.error.error)
                return command

    def receive(self, timeout_s: float) -> tuple[pb.BaseCommand, bytes] | None:
        """The next frame other than a PING, or None when none comes within ``timeout_s``."""
        if self.early:
            return self.early.popleft()
        deadline = time.monotonic() + timeout_s
        while True:
            frame = self.sock.receive(max(0.0, deadline - time.monotonic()))
            if frame is None or not self.answer_ping(frame[0], self.sock):
                return frame

    @staticmethod
    def answer_ping(command: pb.BaseCommand, sock: _Socket) -> bool:
        if command.type == T.PING:
            sock.send(T(type=T.PONG, pong=pb.CommandPong()))
        return command.type in (T.PING, T.PONG)

    def close(self) -> None:
        self.sock.close()


_ASYNCHRONOUS = frozenset({T.MESSAGE, T.SEND_RECEIPT, T.SEND_ERROR})


class EntrySession:
    """A non-durable Reader subscription on one topic partition, at the protocol level.

    ``start`` is (ledger, entry) of the first entry wanted, or None for the earliest.
    """

    def __init__(self, connection: ConnectionOptions, topic: str, start: tuple[int, int] | None, *,
                 receiver_queue_size: int, reader_name: str | None = None) -> None:
        self.topic = topic
        self._permits = max(2, receiver_queue_size)
        self._unrequested = 0
        self._link = BrokerLink(connection, topic)
        try:
            self._subscribe(start, reader_name)
        except BaseException:
            self._link.close()
            raise

    def _subscribe(self, start: tuple[int, int] | None, reader_name: str | None) -> None:
        subscribe = pb.CommandSubscribe(
            topic=self.topic, subscription=f"magnetar-spark-reader-{uuid.uuid4().hex[:10]}",
            subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=self._link.next_request(),
            durable=False, initialPosition=pb.CommandSubscribe.Earliest)
        if reader_name:
            subscribe.consumer_name = reader_name
        if start is not None:
            # MessageIdData's fields are unsigned: "before the ledger's first entry" is entry -1.
            subscribe.start_message_id.ledgerId, subscribe.start_message_id.entryId = (v & _U64 for v in start)
        self._link.request(T(type=T.SUBSCRIBE, subscribe=subscribe), "SUCCESS")
        self._flow(self._permits)

    def next_entry(self, timeout_s: float) -> ReceivedEntry | None:
        """The next entry the broker pushes, or None when none comes within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            frame = self._link.receive(max(0.0, deadline - time.monotonic()))
            if frame is None:
                return None
            command, rest = frame
            if command.type == T.MESSAGE:
                mid = command.message.message_id
                return ReceivedEntry(mid.ledgerId, mid.entryId, rest)
            if command.type in (T.CLOSE_CONSUMER, T.ERROR):
                raise BrokerSessionError(f"the broker closed the reader of {self.topic} "
                                         f"({T.Type.Name(command.type)}); the task's retry reads the range again")

    def consumed(self, messages: int) -> None:
        """Give the broker back permits for ``messages`` messages, half a queue at a time."""
        self._unrequested += messages
        if self._unrequested >= self._permits // 2:
            self._flow(self._unrequested)
            self._unrequested = 0

    def last_message_id(self) -> tuple[int, int, int]:
        """(ledger, entry, batch index) of the topic's last message; ledger -1 when empty."""
        request = pb.CommandGetLastMessageId(consumer_id=1, request_id=self._link.next_request())
        answer = self._link.request(T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=request),
                                    "GET_LAST_MESSAGE_ID_RESPONSE").getLastMessageIdResponse
        mid = answer.last_message_id
        signed = [v - (1 << 64) if v >= 1 << 63 else v for v in (mid.ledgerId, mid.entryId)]
        return signed[0], signed[1], mid.batch_index if mid.HasField("batch_index") else -1

    def close(self) -> None:
        try:
            self._link.send(T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                consumer_id=1, request_id=self._link.next_request())))
        except OSError:
            pass
        self._link.close()

    def _flow(self, permits: int) -> None:
        self._link.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=permits)))
