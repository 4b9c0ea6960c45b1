"""A client connection of the command-level simulation: what the server's connection
(server/connection.py) does with a command, minus the socket.

:class:`SimConnection` implements core's ``ClientConnection`` and the consumer and
producer sinks. Commands go to core's handlers (``core/broker/commands.py``) in the
order they came; a producer's consecutive SENDs go to core's publish path as the
server's connection hands them over. Everything the broker writes back goes to
``written`` with its connection, in the order written across all connections that share
it (the broker's order), for the simulated clients to read: commands as protocol
buffers, MESSAGE frames and receipts as :class:`Message` and :class:`Receipt`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.core.broker import commands as broker_commands
from magnetar.core.broker.command_subjects import subject_of
from magnetar.core.errors import BrokerError, ServerError
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import publish
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.publish import RawSend
from magnetar.core.topics.topic import Topic, topic_of
from magnetar.server.connection import raw_send
from magnetar.testing.sim.command_shell_twin import SimBroker
from magnetar.testing.sim.sim_storage import Completion
from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import Frame, request_id_of

T = pb.BaseCommand


@dataclass(slots=True)
class Message:
    consumer_id: int
    pos: Position
    entry: bytes
    redelivery_count: int


@dataclass(slots=True)
class Receipt:
    producer_id: int
    sequence_id: int
    pos: Position


Written = pb.BaseCommand | Message | Receipt


class SimConnection:
    """One client connection, broker side; ``written`` is what its client reads."""

    def __init__(self, broker: SimBroker, address: str,
                 written: deque[tuple[SimConnection, Written]] | None = None) -> None:
        self._broker = broker
        self.address = address
        self.client_version = "magnetar-sim"
        self.producers: dict[int, Producer] = {}
        self.closed_producers: set[int] = set()
        self.subscribing: dict[int, int] = {}
        self.producer_topics: dict[int, Topic] = {}
        self.producer_requests: dict[int, int] = {}
        self.consumers: dict[int, tuple[Consumer, Subscription]] = {}
        self.written: deque[tuple[SimConnection, Written]] = deque() if written is None else written
        self.closed = False
        #: producers and consumers whose PRODUCER or SUBSCRIBE waits for its topic to load:
        #: later commands about them wait, in order (server/connection.py)
        self._loading: set[tuple[int, int]] = set()
        self._held: deque[tuple[pb.BaseCommand, bytes | None]] = deque()
        #: every command handled that raised something other than a broker error (a bug)
        self.failures: list[BaseException] = []

    @property
    def broker(self) -> SimBroker:
        return self._broker

    @property
    def role(self) -> str | None:
        return None

    # -- commands in ------------------------------------------------------------------
    def handle(self, cmd: pb.BaseCommand, entry: bytes | None = None) -> None:
        if self.closed:
            return
        if self._loading and subject_of(cmd) in self._loading:
            self._held.append((cmd, entry))  # its PRODUCER or SUBSCRIBE comes first
            return
        if cmd.type == T.SEND:
            self._publish([(cmd, entry or b"")])
            return
        handler = broker_commands.HANDLERS.get(cmd.type)
        if handler is None:
            self._reply_error(cmd, ServerError.NotAllowedError, f"Command {cmd.type} is not supported")
            return
        self._run(cmd, lambda: handler(self, Frame(cmd, entry)))

    def send_run(self, sends: Sequence[tuple[pb.BaseCommand, bytes]]) -> None:
        """Consecutive SENDs of one producer, read together (server/connection.py ``_publish``)."""
        if self.closed:
            return
        if self._loading and subject_of(sends[0][0]) in self._loading:
            self._held.extend(sends)
            return
        self._publish(sends)

    def _publish(self, sends: Sequence[tuple[pb.BaseCommand, bytes]]) -> None:
        producer_id = sends[0][0].send.producer_id
        producer = self.producers.get(producer_id)
        topic = self.producer_topics.get(producer_id)
        raws: list[RawSend] = [raw_send(Frame(cmd, entry)) for cmd, entry in sends]
        if producer is None or topic is None:
            if producer_id in self.closed_producers:
                return  # dropped unanswered, as the broker does (server/connection.py)
            for sequence_id, *_ in raws:
                self.send_error(producer_id, sequence_id, ServerError.NotAllowedError,
                                f"Producer id {producer_id} is not registered on this connection")
            return
        done = 0
        while done < len(raws):
            try:
                taken, _ = publish.publish(topic, producer, raws[done:], self._broker.now_ms())
                done += taken
            except BrokerError as exc:
                self.send_error(producer_id, raws[done][0], exc.code, exc.message)
                done += 1
            except Exception as exc:  # the server answers UnknownError; the simulation reports it
                self.failures.append(exc)
                self.send_error(producer_id, raws[done][0], ServerError.UnknownError, f"internal error: {exc}")
                done += 1

    def _run(self, cmd: pb.BaseCommand, work: Callable[[], None]) -> None:
        try:
            work()
        except BrokerError as exc:
            self._reply_error(cmd, exc.code, exc.message)
        except Exception as exc:  # the server answers UnknownError; the simulation reports it
            self.failures.append(exc)
            self._reply_error(cmd, ServerError.UnknownError, f"internal error: {exc}")

    def _reply_error(self, cmd: pb.BaseCommand, code: int, message: str) -> None:
        request_id = request_id_of(cmd)
        if cmd.type == T.ACK and cmd.ack.HasField("request_id"):
            self.write_command(commands.ack_response(cmd.ack.consumer_id, cmd.ack.request_id, code, message))
        elif request_id is not None:
            self.write_command(commands.error(request_id, code, message))

    # -- ClientConnection ----------------------------------------------------------------
    def write_command(self, cmd: pb.BaseCommand) -> None:
        self._write(cmd)

    def _write(self, item: Written) -> None:
        if not self.closed:
            self.written.append((self, item))

    def reply_when_done(self, work: Completion, request: pb.BaseCommand, reply: pb.BaseCommand) -> None:
        def answer(done: Completion) -> None:
            failure = done.exception()
            closed = broker_commands.closed_while_answering(self, request)
            if failure is None and closed:
                self._reply_error(request, ServerError.ServiceNotReady, "closed by the broker before it was ready")
            elif failure is None:
                self.write_command(reply)
            else:
                self._reply_error(request, ServerError.MetadataError, f"metadata store failure: {failure}")
        work.add_done_callback(answer)

    def with_topic(self, name: TopicName, create: bool, request: pb.BaseCommand,
                   then: Callable[[Topic], None]) -> None:
        topic = self._broker.topics.get(str(name))
        if topic is not None:
            then(topic)
            return
        subject = subject_of(request)
        if subject is not None:
            self._loading.add(subject)

        def loaded(topic: Topic | None, failure: BaseException | None) -> None:
            if subject is not None:
                self._loading.discard(subject)
            if self.closed:
                return
            if failure is not None:
                self._run(request, lambda: _raise(failure))
            elif topic is not None:
                self._run(request, lambda: then(topic))
            self._release_held()
        self._broker.request_load(name, create, loaded)

    def _release_held(self) -> None:
        """Commands about a producer or consumer whose topic has loaded, in the order they
        came; those about one still loading wait again."""
        held, self._held = self._held, deque()
        for cmd, entry in held:
            self.handle(cmd, entry)

    def drop_producer(self, producer_id: int) -> None:
        producer = self.producers.pop(producer_id, None)
        topic = self.producer_topics.pop(producer_id, None)
        if producer is not None and topic is not None:
            self.producer_requests.pop(producer_id, None)
            promoted = topic.remove_producer(producer)
            if promoted is not None:
                promoted.sink.producer_ready(promoted)

    def close(self) -> None:
        """The connection drops (server/connection.py ``connection_lost``)."""
        if self.closed:
            return
        self.closed = True
        for producer_id in list(self.producers):
            self.drop_producer(producer_id)
        now = self._broker.now_ms()
        for consumer, sub in list(self.consumers.values()):
            topic_of(sub).remove_consumer(sub, consumer, now)
        self.consumers.clear()
        self._held.clear()

    # -- ConsumerSink ------------------------------------------------------------------------
    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        self._write(Message(consumer_id, pos, entry, redelivery_count))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.write_command(commands.active_consumer_change(consumer_id, is_active))

    def reached_end_of_topic(self, consumer_id: int) -> None:
        if consumer_id in self.consumers:
            self.write_command(commands.reached_end_of_topic(consumer_id))

    def close_consumer(self, consumer_id: int) -> None:
        if self.consumers.pop(consumer_id, None) is not None:
            self.write_command(commands.close_consumer(consumer_id))

    # -- ProducerSink -------------------------------------------------------------------------
    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int, pos: Position) -> None:
        self._write(Receipt(producer_id, sequence_id, pos))

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        for sequence_id, _, pos in receipts:
            self._write(Receipt(producer_id, sequence_id, pos))

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        self.write_command(commands.send_error(producer_id, sequence_id, code, message))

    def close_producer(self, producer_id: int) -> None:
        if self.producers.pop(producer_id, None) is not None:
            self.producer_topics.pop(producer_id, None)
            self.closed_producers.add(producer_id)
            self.write_command(commands.close_producer(producer_id))

    def producer_ready(self, producer: Producer) -> None:
        """WaitForExclusive producers are not simulated."""


def _raise(failure: BaseException) -> None:
    raise failure
