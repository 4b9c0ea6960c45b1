"""One client connection: frames in, core calls, frames out.

A connection is an asyncio protocol. It decodes frames, routes each command to a
handler, and implements the sinks core uses to send MESSAGE frames, receipts and
broker-initiated closes. Outgoing frames are gathered and written once per loop
iteration, so a dispatch of many entries costs one write; a connection that gathered
more than a few high-water marks writes at once and goes on while the transport takes it.

Back-pressure both ways, as Pulsar does with netty's channel writability and auto-read:
dispatch to the connection's consumers stops while its outgoing bytes (gathered plus the
transport's buffer) are above ``pulsarChannelWriteBufferHighWaterMark`` and resumes below
the low mark; reading stops while too many sends wait for their receipts (or, by
default, while the client does not read what is written to it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, cast

from magnetar import __version__
from magnetar.core.broker import commands as broker_commands
from magnetar.core.broker.command_subjects import subject_of
from magnetar.core.broker.deadlines import Deadlines
from magnetar.core.errors import BrokerError, NotAllowed, ServerError, ServiceNotReady
from magnetar.core.names import TopicName
from magnetar.core.policies.publish_throttle import PendingPublishes
from magnetar.core.positions import Position, to_signed64
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import admission
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.publish import RawSend
from magnetar.core.topics.topic import Topic, topic_of
from magnetar.security.authentication import AuthenticationService
from magnetar.security.identity import AuthenticationFailed, Identity
from magnetar.security.peer_certificates import peer_common_name
from magnetar.server.broker_service import BrokerService
from magnetar.server.clock import monotonic_ms, now_ms
from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.commands import to_uint64
from magnetar.wire.frames import Frame, FrameDecoder, ProtocolError, encode_command, request_id_of
from magnetar.wire.hot_commands import message_frame_header, send_receipt_frame, send_receipt_frames

log = logging.getLogger("magnetar.connection")

MAX_PROTOCOL_VERSION = 21
#: high-water marks of outgoing bytes a connection gathers before it writes them
GATHER_MARKS = 8
#: the challenge data asking a client for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA)
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
#: the connection's deadlines on the broker's one timer
KEEPALIVE, AUTH_REFRESH, THROTTLE = "keep-alive", "authentication refresh", "publish throttle"
T = pb.BaseCommand


class ServerConnection(asyncio.Protocol):
    def __init__(self, broker: BrokerService) -> None:
        self.broker = broker
        self.decoder = FrameDecoder(broker.config.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self.peer_ip = ""
        #: producers and consumers whose PRODUCER or SUBSCRIBE waits for its topic to load
        #: (see core/broker/command_subjects.py); later commands about them wait in ``_waiting``
        self._loading: set[tuple[int, int]] = set()
        self._waiting: list[Frame] = []
        #: the garbage-collection epoch at admission (see ``LongLivedObjects.released``)
        self._admitted_at = 0
        self.client_version = ""
        self.protocol_version = 0
        self.connected = False
        self.producers: dict[int, Producer] = {}
        #: producer ids the broker closed (Pulsar's ``recentlyClosedProducers``): SENDs for
        #: them that were already on the wire are dropped, not answered with an error
        self.closed_producers: dict[int, float] = {}
        self.subscribing: dict[int, int] = {}
        self.producer_topics: dict[int, Topic] = {}
        self.producer_requests: dict[int, int] = {}
        self.consumers: dict[int, tuple[Consumer, Subscription]] = {}
        self._out: list[bytes] = []
        self._flush_scheduled = False
        #: the socket's descriptor, watched for unread bytes while the connection lasts
        self._fd = -1
        self._received_since_ping = True
        self._ping_pending = False
        #: keep-alive, credential check and publish throttle, on the broker's one timer
        self.deadlines = Deadlines(broker.core.timers)
        self.closed = False
        config = broker.config
        self.pending_publishes = PendingPublishes(config.maxPendingPublishRequestsPerConnection,
                                                  broker.publish_buffer)
        self._high_water = config.pulsarChannelWriteBufferHighWaterMark
        #: bytes a connection gathers before it writes them without waiting for the loop
        #: turn to end: a few marks, so large entries still go several to a write
        self._gather_limit = GATHER_MARKS * self._high_water
        self._low_water = config.pulsarChannelWriteBufferLowWaterMark
        self._pause_reading_if_unwritable = config.pulsarChannelPauseReceivingRequestsIfUnwritable
        self._out_bytes = 0
        #: dispatch to this connection's consumers is stopped (outgoing bytes above high water)
        self.consumers_paused = False
        #: the transport's own buffer is above high water (asyncio's pause_writing)
        self._transport_paused = False
        self.reading_paused = False
        #: frames read before reading was paused and not yet handled
        self._held: list[Frame] = []
        #: who the client authenticated as; None while authentication is off
        self.identity: Identity | None = None
        self.peer_common_name = ""
        self._auth_method = "none"
        self._connecting = False
        self._supports_auth_refresh = False
        self._auth_challenge_pending = False

    # -- asyncio protocol -------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.address = f"/{peer[0]}:{peer[1]}" if peer else ""
        self.peer_ip = str(peer[0]) if peer else ""
        refusal = self.broker.admit_connection(self.peer_ip)
        if refusal is not None:
            log.warning("refusing %s: %s", self.address, refusal)
            self._fail_connection(refusal)
            return
        self.peer_common_name = peer_common_name(transport.get_extra_info("ssl_object"))
        self.broker.connections.add(self)
        self._watch_socket(transport)
        self._admitted_at = self.broker.long_lived.epoch
        transport.set_write_buffer_limits(high=self._high_water, low=self._low_water)
        self._arm_keepalive()

    def _watch_socket(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            self.broker.activity.watch(self._fd, self)

    def data_received(self, data: bytes) -> None:
        self._received_since_ping = True
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            # The frames before the bad one arrived whole: serve them, then give up.
            self._handle_all(exc.frames_before)
            self.broker.appends.write_appends()
            log.warning("closing %s: %s", self.address, exc)
            self._fail_connection(str(exc))
            return
        self._handle_all(frames)
        self.broker.appends.write_appends()

    def _handle_all(self, frames: list[Frame]) -> None:
        if self._held:
            self._held.extend(frames)
            return
        index = 0
        while index < len(frames):
            if self.closed:
                return
            if self.reading_paused:
                # frames that came with the read but after the pause wait for the resume,
                # or a pipelining client would get past the limits by one read's worth
                self._held = list(frames[index:])
                return
            if self._loading and subject_of(frames[index].command) in self._loading:
                self._waiting.append(frames[index])  # its PRODUCER or SUBSCRIBE comes first
                index += 1
            elif frames[index].command.type == T.SEND and self.connected:
                index += _publish(self, frames, index)
            else:
                self._handle(frames[index])
                index += 1

    def _release_held(self) -> None:
        """Handle what waited: commands about a producer or consumer whose topic has loaded
        (any still loading wait again), then what a paused read held back, which came later."""
        frames = self._waiting + self._held
        self._waiting, self._held = [], []
        if frames:
            self._handle_all(frames)
            self.broker.appends.write_appends()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broker.activity.unwatch(self._fd, self)
        self.broker.activity.replies_waiting.discard(self)
        self.deadlines.close()
        if self in self.broker.connections:
            self.broker.connections.discard(self)
            self.broker.connection_closed(self.peer_ip, self._admitted_at)
        now = now_ms()
        for producer_id in list(self.producers):
            self.drop_producer(producer_id)
        for consumer, sub in list(self.consumers.values()):
            topic_of(sub).remove_consumer(sub, consumer, now)
        self.consumers.clear()
        self._out = []
        self._out_bytes = 0
        self._held = []
        self._waiting = []
        if self.pending_publishes.release_all():
            self.broker.resume_publishers()

    # -- back-pressure ------------------------------------------------------------
    def pause_writing(self) -> None:
        self._transport_paused = True
        self._pause_consumers()
        self.update_reading()

    def resume_writing(self) -> None:
        self._transport_paused = False
        if self._out_bytes <= self._low_water:
            self._resume_consumers()
        self.update_reading()

    def _pause_consumers(self) -> None:
        self.consumers_paused = True
        for consumer, _ in self.consumers.values():
            consumer.write_paused = True

    def _resume_consumers(self) -> None:
        if not self.consumers_paused or self.closed:
            return
        self.consumers_paused = False
        now = now_ms()
        for consumer, sub in list(self.consumers.values()):
            if consumer.write_paused:
                consumer.write_paused = False
                sub.dispatcher.on_writable(consumer, now)

    def throttle_reading(self, pause_ms: int) -> None:
        """A publish rate limit was exceeded: this connection is not read for a while."""
        if self.deadlines.pending(THROTTLE) or self.closed:
            return
        self.deadlines.set(THROTTLE, now_ms() + pause_ms, self._end_throttle)
        self.update_reading()

    def _end_throttle(self, now: int) -> None:
        self.update_reading()

    def update_reading(self) -> None:
        """Stop or restart reading the socket (Pulsar toggles netty's auto-read)."""
        if self.transport is None or self.closed:
            return
        held_by_writes = (self._pause_reading_if_unwritable and self._transport_paused) \
            or self.deadlines.pending(THROTTLE)
        if not self.reading_paused:
            if held_by_writes or self.pending_publishes.should_pause():
                self.reading_paused = True
                self.transport.pause_reading()
        elif not held_by_writes and self.pending_publishes.may_resume():
            self.reading_paused = False
            self.transport.resume_reading()
            self._release_held()

    def _answered(self, producer_id: int, count: int = 1) -> None:
        if self.pending_publishes.answered(producer_id, count):
            self.broker.resume_publishers()
        elif self.reading_paused:
            self.update_reading()

    # -- writing ------------------------------------------------------------------
    def write(self, *parts: bytes) -> None:
        """Queue ``parts``; what a loop turn queued goes out in one write at its end."""
        if self.closed:
            return
        self._out += parts
        self._out_bytes += sum(map(len, parts))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.broker.activity.replies_waiting.add(self)
            asyncio.get_running_loop().call_soon(self._flush)

    def write_command(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    def reply_when_done(self, work: concurrent.futures.Future[Any], request: pb.BaseCommand,
                        reply: pb.BaseCommand) -> None:
        """Send ``reply`` once ``work`` (done on another thread) succeeded, else an error
        for ``request``: for answers that promise something is on disk."""
        def answer(done: asyncio.Future[Any]) -> None:
            exc = done.exception()
            closed = broker_commands.closed_while_answering(self, request)
            if exc is None and closed:
                self._reply_error(request, ServerError.ServiceNotReady, "closed by the broker before it was ready")
            elif exc is None:
                self.write_command(reply)
            else:
                log.error("%s from %s failed", T.Type.Name(request.type), self.address, exc_info=exc)
                self._reply_error(request, ServerError.MetadataError, f"metadata store failure: {exc}")
        asyncio.wrap_future(work).add_done_callback(answer)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.broker.activity.replies_waiting.discard(self)
        self._write_out()
        if self.consumers_paused and not self._transport_paused:
            self._resume_consumers()

    def _write_out(self) -> None:
        """Hand what was gathered to the transport, which calls ``pause_writing`` at once
        if its buffer is then above high water."""
        if self.transport is not None and self._out and not self.closed:
            self.transport.writelines(self._out)
        self._out = []
        self._out_bytes = 0

    def close(self) -> None:
        self._flush()
        if self.transport is not None:
            self.transport.close()

    @property
    def role(self) -> str | None:
        return None if self.identity is None else self.identity.role

    def _fail_connection(self, reason: str, code: int = ServerError.NotAllowedError) -> None:
        self.write_command(commands.error(to_uint64(-1), code, reason))
        self.closed = False
        self._flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- keep-alive ---------------------------------------------------------------
    def _arm_keepalive(self, now: int | None = None) -> None:
        at_ms = (now_ms() if now is None else now) + round(self.broker.config.keepAliveIntervalSeconds * 1000)
        self.deadlines.set(KEEPALIVE, at_ms, self._keepalive_tick)

    def _keepalive_tick(self, now: int) -> None:
        if self.closed:
            return
        if not self.connected or (self._ping_pending and not self._received_since_ping):
            log.info("closing %s: keep-alive timeout", self.address)
            self.close()
            return
        self._received_since_ping = False
        self._ping_pending = True
        self.write_command(commands.ping())
        self._arm_keepalive(now)

    # -- sinks used by core ---------------------------------------------------------
    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        self.write(message_frame_header(consumer_id, pos.ledger_id, pos.entry_id, partition, redelivery_count,
                                        ack_set, len(entry)), entry)
        if self._out_bytes > self._gather_limit:
            # Waiting for the loop turn to end would send one gathering a turn; a turn
            # that also takes in publishes lasts milliseconds, and the consumer would starve.
            self._write_out()
        if self._transport_paused:
            self._pause_consumers()

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        if self.protocol_version >= 12:
            self.write_command(commands.active_consumer_change(consumer_id, is_active))

    def reached_end_of_topic(self, consumer_id: int) -> None:
        if consumer_id in self.consumers:
            self.write_command(commands.reached_end_of_topic(consumer_id))

    def close_consumer(self, consumer_id: int) -> None:
        entry = self.consumers.pop(consumer_id, None)
        if entry is not None:
            _, sub = entry
            self.write_command(commands.close_consumer(consumer_id, self.broker.successors.get(str(sub.topic.name))))

    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int, pos: Position) -> None:
        self.write(send_receipt_frame(producer_id, sequence_id, pos.ledger_id, pos.entry_id, highest_sequence_id))
        self._answered(producer_id)

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        self.write(send_receipt_frames(producer_id, receipts))
        self._answered(producer_id, len(receipts))

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        self.write_command(commands.send_error(producer_id, sequence_id, code, message))
        self._answered(producer_id)

    def producer_ready(self, producer: Producer) -> None:
        """A WaitForExclusive producer got access: the second PRODUCER_SUCCESS."""
        topic = self.producer_topics.get(producer.producer_id)
        request_id = self.producer_requests.get(producer.producer_id)
        if topic is None or request_id is None:
            return
        self.write_command(commands.producer_success(
            request_id, producer.producer_name, admission.last_sequence_id(topic, producer.producer_name),
            topic_epoch=topic.topic_epoch, producer_ready=True))

    def close_producer(self, producer_id: int) -> None:
        if self.producers.pop(producer_id, None) is not None:
            topic = self.producer_topics.pop(producer_id, None)
            self.closed_producers[producer_id] = monotonic_ms()
            successor = None if topic is None else self.broker.successors.get(str(topic.name))
            self.write_command(commands.close_producer(producer_id, successor))
            # read again once the caller's round of closes is over, not in the middle of it
            unanswered_dropped(self, producer_id, asyncio.get_running_loop().call_soon)

    # -- command routing ---------------------------------------------------------------
    def _handle(self, frame: Frame) -> None:
        cmd = frame.command
        if not self.connected and cmd.type != T.CONNECT:
            self._fail_connection("the first command must be CONNECT")
            return
        handler = self.broker.cluster_handlers.get(cmd.type) or _HANDLERS.get(cmd.type)
        if handler is None:
            self._unsupported(cmd)
            return
        self._run(cmd, lambda: handler(self, frame))

    def _run(self, cmd: pb.BaseCommand, work: Callable[[], None]) -> None:
        """Handle ``cmd`` (or finish handling it); a failure answers it as its client expects."""
        try:
            work()
        except BrokerError as exc:
            self._reply_error(cmd, exc.code, exc.message)
        except Exception as exc:  # a bug must not take the broker down
            log.exception("error handling %s from %s", T.Type.Name(cmd.type), self.address)
            self._reply_error(cmd, ServerError.UnknownError, f"internal error: {exc}")

    def _reply_error(self, cmd: pb.BaseCommand, code: int, message: str, always: bool = False) -> None:
        """Answer a failed command the way its client expects; ``always`` answers even a
        command without a request id (an ERROR whose id no client knows is ignored)."""
        request_id = request_id_of(cmd)
        if cmd.type == T.SEND:
            self.send_error(cmd.send.producer_id, cmd.send.sequence_id, code, message)
        elif cmd.type == T.PARTITIONED_METADATA:
            self.write_command(commands.partitioned_metadata_error(request_id or 0, code, message))
        elif cmd.type == T.LOOKUP:
            self.write_command(commands.lookup_error(request_id or 0, code, message))
        elif cmd.type == T.GET_SCHEMA:
            self.write_command(commands.get_schema_error(request_id or 0, code, message))
        elif cmd.type == T.GET_OR_CREATE_SCHEMA:
            self.write_command(commands.get_or_create_schema_error(request_id or 0, code, message))
        elif cmd.type == T.ACK and cmd.ack.HasField("request_id"):
            self.write_command(commands.ack_response(cmd.ack.consumer_id, cmd.ack.request_id, code, message))
        elif request_id is not None:
            self.write_command(commands.error(request_id, code, message))
        elif always or cmd.type == T.CONNECT:
            self.write_command(commands.error(to_uint64(-1), code, message))
        else:
            log.info("%s from %s failed: %s", T.Type.Name(cmd.type), self.address, message)

    def _unsupported(self, cmd: pb.BaseCommand) -> None:
        name = T.Type.Name(cmd.type) if cmd.type in T.Type.values() else str(cmd.type)
        self._reply_error(cmd, ServerError.NotAllowedError, f"Command {name} is not supported by Magnetar",
                          always=True)

    def with_topic(self, name: TopicName, create: bool, request: pb.BaseCommand,
                   then: Callable[[Topic], None]) -> None:
        topic = self.broker.topics.get(str(name))
        if topic is not None:
            then(topic)
            return
        # Meanwhile the connection's other commands are served; those about this producer
        # or consumer wait, and are handled after it in the order they came.
        subject = subject_of(request)
        if subject is not None:
            self._loading.add(subject)

        def loaded(load: asyncio.Future[Topic]) -> None:
            failure = load.exception()
            if failure is None and self.broker.topics.get(str(name)) is not load.result():
                # released (unloaded, handed over) between its load and this answer
                failure = ServiceNotReady(f"Topic {name} was unloaded while it loaded; please redo the lookup")
            if subject is not None:
                self._loading.discard(subject)
            if self.closed:
                return  # the topic stays loaded; nobody is attached to it
            self._run(request, lambda: then(load.result()) if failure is None else _raise(failure))
            self._release_held()
        asyncio.ensure_future(self.broker.load_topic(name, create)).add_done_callback(loaded)

    def drop_producer(self, producer_id: int) -> None:
        producer = self.producers.pop(producer_id, None)
        topic = self.producer_topics.pop(producer_id, None)
        if producer is not None and topic is not None:
            self.producer_requests.pop(producer_id, None)
            promoted = topic.remove_producer(producer)
            if promoted is not None:
                promoted.sink.producer_ready(promoted)
        unanswered_dropped(self, producer_id)


def unanswered_dropped(conn: ServerConnection, producer_id: int,
                       run: Callable[[Callable[[], None]], object] = lambda then: then()) -> None:
    """A closed producer's sends get no receipt: they no longer count against the limits,
    and a connection no longer read at its limit is read again."""
    if conn.pending_publishes.dropped(producer_id):
        run(conn.broker.resume_publishers)
    elif conn.reading_paused:
        run(conn.update_reading)


def finish_command(conn: ServerConnection, frame: Frame, work: Callable[[], None]) -> None:
    """Finish handling ``frame`` with ``work`` (after an await elsewhere); a failure
    answers it as its client expects."""
    conn._run(frame.command, work)


def _raise(failure: BaseException) -> None:
    raise failure




def _connect(conn: ServerConnection, frame: Frame) -> None:
    if conn.connected or conn._connecting:
        raise NotAllowed("CONNECT received twice on one connection")
    connect = frame.command.connect
    conn.client_version = connect.client_version
    conn.protocol_version = connect.protocol_version
    conn._supports_auth_refresh = connect.feature_flags.supports_auth_refresh
    service = conn.broker.authentication
    if service is None:
        _complete_connect(conn)
        return
    conn._connecting = True
    conn._auth_method = auth_method_of(connect)
    _authenticate(conn, service, conn._auth_method, connect.auth_data)


def _complete_connect(conn: ServerConnection) -> None:
    conn._connecting = False
    conn.connected = True
    version = max(min(conn.protocol_version, MAX_PROTOCOL_VERSION), 0)
    conn.write_command(commands.connected(f"Magnetar-{__version__}", version, conn.broker.config.maxMessageSize))
    if conn.identity is not None:
        log.info("%s connected with role=%s using authMethod=%s", conn.address, conn.identity.role,
                 conn.identity.method)
        _arm_auth_refresh(conn, now_ms())


def auth_method_of(connect: pb.CommandConnect) -> str:
    """The auth method a CONNECT names; old clients send the AuthMethod enum instead."""
    if connect.HasField("auth_method_name"):
        return connect.auth_method_name
    if connect.HasField("auth_method"):
        return pb.AuthMethod.Name(connect.auth_method).removeprefix("AuthMethod").lower()
    return "none"


def _authenticate(conn: ServerConnection, service: AuthenticationService, method: str, data: bytes) -> None:
    """Check credentials off the event loop (a bcrypt check takes tens of milliseconds),
    then finish the CONNECT or the refresh on it."""
    if method == "tls":
        data = conn.peer_common_name.encode()  # the verified certificate, never the client's word
    work = asyncio.get_running_loop().run_in_executor(None, service.authenticate, method, bytes(data))
    work.add_done_callback(lambda done: _authenticated(conn, done))


def _authenticated(conn: ServerConnection, done: asyncio.Future[Identity]) -> None:
    if conn.closed:
        return
    exc = done.exception()
    if exc is not None:
        if not isinstance(exc, AuthenticationFailed):
            log.error("authentication of %s failed", conn.address, exc_info=exc)
        operation = "connect" if conn._connecting else "authentication-refresh"
        log.warning("%s failed to authenticate on %s with method %s: %s", conn.address, operation,
                    conn._auth_method, exc)
        conn._fail_connection("Failed to authenticate", ServerError.AuthenticationError)
        return
    identity = done.result()
    if conn._connecting:
        conn.identity = identity
        _complete_connect(conn)
        return
    if conn.identity is not None and identity.role != conn.identity.role:
        log.warning("%s: the role cannot change on an authentication refresh (%s -> %s); closing",
                    conn.address, conn.identity.role, identity.role)
        conn.close()
        return
    conn.identity = identity
    log.info("%s refreshed authentication credentials for role %s", conn.address, identity.role)


def _arm_auth_refresh(conn: ServerConnection, now: int) -> None:
    at_ms = now + round(conn.broker.config.authenticationRefreshCheckSeconds * 1000)
    conn.deadlines.set(AUTH_REFRESH, at_ms, lambda now: _auth_refresh_tick(conn, now))


def _auth_refresh_tick(conn: ServerConnection, now: int) -> None:
    """Pulsar's refresh check: expired credentials get one AUTH_CHALLENGE, and the
    connection is closed when the client cannot or does not answer it in time."""
    if conn.closed or conn.identity is None:
        return
    if conn.identity.expired(now):
        if not conn._supports_auth_refresh or conn._auth_challenge_pending:
            why = "does not support credential refresh" if not conn._supports_auth_refresh else "did not refresh"
            log.info("closing %s: credentials expired and the client %s", conn.address, why)
            conn.close()
            return
        conn._auth_challenge_pending = True
        conn.write_command(commands.auth_challenge(f"Magnetar-{__version__}", conn.protocol_version,
                                                  conn._auth_method, REFRESH_AUTH_DATA))
    _arm_auth_refresh(conn, now)


def _auth_response(conn: ServerConnection, frame: Frame) -> None:
    service = conn.broker.authentication
    response = frame.command.authResponse.response
    if service is None or not conn.connected:
        raise NotAllowed("AUTH_RESPONSE without an authentication in progress")
    conn._auth_challenge_pending = False
    _authenticate(conn, service, response.auth_method_name or conn._auth_method, response.auth_data)


def _publish(conn: ServerConnection, frames: list[Frame], start: int) -> int:
    """Publish the SENDs of one producer that follow each other from ``start``; how many
    frames that took (at least one). A single SEND is a run of one. Every SEND is answered
    by one receipt or error; until then it counts against the connection's and the
    broker's limits. On a topic with a publish rate limit each send is a run of its own,
    so that the connection stops being read as soon as one exceeds the limit."""
    producer_id = frames[start].command.send.producer_id
    producer = conn.producers.get(producer_id)
    topic = conn.producer_topics.get(producer_id)
    limited = topic is not None and conn.broker.publish_throttles.limited(topic)
    pending = conn.pending_publishes
    sends: list[RawSend] = []
    for frame in islice(frames, start, start + 1 if limited else None):
        command = frame.command
        if command.type != T.SEND or command.send.producer_id != producer_id:
            break
        sends.append(raw_send(frame))
        pending.sent(producer_id, len(sends[-1][3]))
        if pending.should_pause():
            conn.update_reading()
            break
    if producer is None or topic is None:
        closed_at = conn.closed_producers.get(producer_id)
        recent_ms = conn.broker.config.keepAliveIntervalSeconds * 1000
        if closed_at is not None and monotonic_ms() - closed_at < recent_ms:
            # dropped unanswered, as Pulsar does: these crossed the broker's close of their
            # producer on the wire (its topic unloaded or handed over), and the client sends
            # them again once it has reconnected; an error would make it drop the connection.
            # "Recently" is a keep-alive interval (keepAliveIntervalSeconds): a client busy enough to
            # read the close seconds late must not lose its connection over it. Later ones
            # get the error, which makes a client that missed the close reconnect.
            conn._answered(producer_id, len(sends))
            return len(sends)
        for sequence_id, *_ in sends:
            conn.send_error(producer_id, sequence_id, ServerError.NotAllowedError,
                            f"Producer id {producer_id} is not registered on this connection")
        return len(sends)
    done = 0
    while done < len(sends):
        try:
            done += conn.broker.appends.publish(topic, producer, sends[done:] if done else sends)
        except BrokerError as exc:
            conn.send_error(producer_id, sends[done][0], exc.code, exc.message)
            done += 1
        except Exception as exc:  # a bug must not take the broker down
            log.exception("error handling SEND from %s", conn.address)
            conn.send_error(producer_id, sends[done][0], ServerError.UnknownError, f"internal error: {exc}")
            done += 1
    if limited:
        _, _, messages, entry = sends[0]
        pause = conn.broker.publish_throttles.pause_ms(topic, messages, len(entry), int(monotonic_ms()))
        if pause:
            conn.throttle_reading(pause)
    return len(sends)


def raw_send(frame: Frame) -> RawSend:
    """A SEND's sequence id, highest sequence id and message count, as the client gave
    them or implied, and its entry."""
    req = frame.command.send
    highest = req.highest_sequence_id if req.HasField("highest_sequence_id") and \
        req.highest_sequence_id >= req.sequence_id else req.sequence_id
    return req.sequence_id, highest, req.num_messages if req.HasField("num_messages") else 1, frame.entry or b""


def _ping(conn: ServerConnection, frame: Frame) -> None:
    conn.write_command(commands.pong())


def _pong(conn: ServerConnection, frame: Frame) -> None:
    conn._ping_pending = False


_HANDLERS: dict[int, Callable[[ServerConnection, Frame], None]] = {
    T.CONNECT: _connect,
    T.PING: _ping,
    T.PONG: _pong,
    T.AUTH_RESPONSE: _auth_response,
    **broker_commands.HANDLERS,
}
__all__ = ["ServerConnection", "TopicName", "to_signed64"]
