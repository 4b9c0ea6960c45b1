"""The broker-wide simulated world: client connections around the real broker core, on
several topics, with simulated storage beneath it.

Each connection holds producers and consumers, as the official client does: a producer
numbers its messages, keeps every send until it is receipted and, after an error or a
reconnect, sends again everything not receipted, in order; a consumer has a receiver
queue the broker fills, an application that takes from it and hands permits back half a
queue at a time, acknowledges (one by one, or cumulatively where the type allows), sends
messages back, seeks. A connection the broker closes (a seek, an unload) reconnects at
once. Clients reach the broker only through :class:`BrokerGateway`'s command methods.

``apply`` runs one step (an :class:`~magnetar.testing.sim.actions.Action`) and returns
False when it does not apply to the world as it is, so a trimmed schedule still replays.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.errors import BrokerError
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.testing.sim.actions import Action, parse_indexes
from magnetar.testing.sim.broker_checkers import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    BrokerChecker,
    BrokerViolation,
    Msg,
)
from magnetar.testing.sim.broker_gateway import NAMESPACE, BrokerGateway
from magnetar.testing.sim.broker_storage import SimStorage
from magnetar.testing.sim.storage_steps import StorageSteps
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry, peek_metadata

#: the topics: two plain ones and the two partitions of a partitioned one
TOPICS = ("t0", "t1", "part-partition-0", "part-partition-1")
#: subscription names and the type each is used with
SUBSCRIPTIONS = {"ex": EXCLUSIVE, "fo": FAILOVER, "sh": SHARED, "ks": KEY_SHARED}

#: verbs and what their arguments mean
BROKER_VERBS = {
    "connect": "CONN: a client connection opens",
    "reconnect": "CONN: the connection drops; its producers and consumers come back on a new one",
    "producer": "CONN NAME TOPIC: a producer (deduplicating where the topic deduplicates)",
    "send": "NAME KEY COUNT [DELAY_MS]: the producer's next COUNT messages, written together "
            "(delivered after DELAY_MS if given)",
    "resend": "NAME: the producer (re)connects and sends every message not receipted again, in order",
    "close-producer": "NAME: the producer closes (only when nothing is outstanding)",
    "subscribe": "CONN NAME TOPIC SUB QUEUE: a consumer (SUB ex, fo, sh or ks gives the type)",
    "receive": "NAME COUNT: the application takes entries from its receiver queue (FLOW half a queue at a time)",
    "ack": "NAME I,J,...: acknowledge received entries by their place in the received list",
    "ack-cum": "NAME I: acknowledge cumulatively up to the I-th received entry (Exclusive, Failover)",
    "nack": "NAME I,J,...: send received entries back (Exclusive and Failover ask for all)",
    "redeliver": "NAME: redeliverUnacknowledgedMessages; the client drops its receiver queue",
    "seek": "NAME earliest|LEDGER:ENTRY: reset the consumer's subscription there",
    "close": "NAME: the consumer closes",
    "flush": "TOPIC: the shell writes what the topic appended",
    "fail-flush": "TOPIC: the write fails; the written-to-be entries are taken back",
    "fail-append": "TOPIC: the next append must write the buffer first, and that fails (entries taken back)",
    "sync": "TOPIC: the group committer syncs what was written; its report is queued",
    "fail-sync": "TOPIC KEEP: the sync fails; sends waiting get errors, the topic unloads "
                 "(KEEP 1: what was written reached the disk all the same)",
    "complete": "TOPIC: the oldest queued sync report of the topic reaches the broker",
    "cursors": "the persist tick: changed cursors and due deduplication snapshots are stored",
    "fail-cursors": "the persist tick's cursor writes fail (they are written again next time)",
    "crash": "the broker loses power and starts again: only synced entries and stored cursors survive",
    "tick": "MS: time passes; due timers fire",
}


def parse_broker_schedule(text: str) -> list[Action]:
    steps = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] not in BROKER_VERBS:
            raise ValueError(f"not a schedule step: {line!r} (verbs: {', '.join(BROKER_VERBS)})")
        steps.append(Action(words[0], tuple(words[1:])))
    return steps


def full_name(topic: str) -> str:
    return NAMESPACE + topic


def short_name(name: str) -> str:
    return name[len(NAMESPACE):] if name.startswith(NAMESPACE) else name


def msg_of(entry: bytes, known: dict[bytes, Msg] | None = None) -> Msg:
    """What identifies the message an entry carries (``known``: those read before)."""
    msg = known.get(entry) if known is not None else None
    if msg is None:
        metadata = peek_metadata(entry)
        msg = Msg(metadata.producer_name, metadata.sequence_id, metadata.partition_key,
                  metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None)
        if known is not None:
            known[entry] = msg
    return msg


@dataclass(slots=True)
class Delivery:
    pos: Position
    msg: Msg


@dataclass(eq=False)
class ClientProducer:
    name: str
    topic: str
    conn: Connection
    producer_id: int
    next_sequence_id: int = 0
    #: sends not receipted yet, in order: sequence id -> (entry, message)
    outstanding: dict[int, tuple[bytes, Msg]] = field(default_factory=dict)
    receipted: dict[int, Position] = field(default_factory=dict)
    #: registered at the broker (created, not closed by either side)
    connected: bool = False
    #: a send failed: the client reconnects and resends before sending more
    broken: bool = False


@dataclass(eq=False)
class ClientConsumer:
    name: str
    topic: str
    sub: str
    conn: Connection
    consumer_id: int
    queue: int
    #: registered at the broker (subscribed, not closed by either side)
    connected: bool = False
    inbox: deque[Delivery] = field(default_factory=deque)
    received: list[Delivery] = field(default_factory=list)
    consumed: int = 0
    #: permits granted and not yet used by a delivery
    permits: int = 0
    #: closed by its application (not to come back)
    closed: bool = False

    @property
    def sub_type(self) -> str:
        return SUBSCRIPTIONS[self.sub]


class Connection:
    """One client connection: the sink of its producers and consumers, as the server's is."""

    def __init__(self, world: BrokerWorld, name: str) -> None:
        self.world = world
        self.name = name
        self.producers: dict[int, ClientProducer] = {}
        self.consumers: dict[int, ClientConsumer] = {}
        self.next_id = 1
        #: the connection is dropping: what the broker writes to it now is lost with it
        self.dropping = False

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    # -- ProducerSink ------------------------------------------------------------------
    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int, pos: Position) -> None:
        producer = self.producers.get(producer_id)
        if producer is not None:
            self.world.receipt(producer, sequence_id, pos)

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        for sequence_id, highest, pos in receipts:
            self.send_receipt(producer_id, sequence_id, highest, pos)

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        producer = self.producers.get(producer_id)
        if producer is not None:
            producer.broken = True
            self.world.errors += 1

    def close_producer(self, producer_id: int) -> None:
        producer = self.producers.get(producer_id)
        if producer is not None and producer.connected:
            self.world.gateway.closed_by_broker(self, producer_id=producer_id)
            producer.connected = False
            self.world.closed_by_broker.append(producer)

    def producer_ready(self, producer: Producer) -> None:
        pass

    # -- ConsumerSink ------------------------------------------------------------------
    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        if self.dropping:
            return
        consumer = self.consumers.get(consumer_id)
        if consumer is None or not consumer.connected:
            raise BrokerViolation(f"{pos} sent on {self.name} to consumer id {consumer_id}, which is closed")
        consumer.permits -= 1
        if consumer.permits < 0:
            raise BrokerViolation(f"{pos} sent to {consumer.name} beyond the permits it granted")
        msg = msg_of(entry, self.world.messages)
        self.world.checker.delivered(full_name(consumer.topic), consumer.sub, consumer.name, pos, msg,
                                     self.world.now_ms)
        consumer.inbox.append(Delivery(pos, msg))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        consumer = self.consumers.get(consumer_id)
        if consumer is not None and not is_active:
            self.world.checker.made_inactive(full_name(consumer.topic), consumer.sub, consumer.name)

    def reached_end_of_topic(self, consumer_id: int) -> None:
        raise BrokerViolation(f"consumer id {consumer_id} on {self.name} told of the end of a topic "
                              f"nobody terminated")

    def close_consumer(self, consumer_id: int) -> None:
        consumer = self.consumers.get(consumer_id)
        if consumer is not None and consumer.connected:
            self.world.gateway.closed_by_broker(self, consumer_id=consumer_id)
            self.world.consumer_gone(consumer)
            self.world.closed_by_broker.append(consumer)


@dataclass
class WorldOptions:
    seed: int
    dedup_topics: frozenset[str]
    entries_per_ledger: int
    dedup_snapshot_entries: int
    strict_delayed: bool
    tick_ms: int
    classic_key_shared: bool = False


def broker_config(options: WorldOptions) -> BrokerConfig:
    return BrokerConfig(
        delayedDeliveryTickTimeMillis=options.tick_ms,
        isDelayedDeliveryDeliverAtTimeStrict=options.strict_delayed,
        subscriptionKeySharedUseClassicPersistentImplementation=options.classic_key_shared,
    )


class BrokerWorld:
    def __init__(self, options: WorldOptions) -> None:
        self.options = options
        self.clock = [1_000_000]
        self.storage = SimStorage(LedgerConfig(max_entries_per_ledger=options.entries_per_ledger), self.clock)
        self.checker = BrokerChecker(0 if options.strict_delayed else options.tick_ms)
        dedup = {full_name(t) for t in options.dedup_topics}
        for t in TOPICS:
            self.checker.add_topic(full_name(t), full_name(t) in dedup)
        self.gateway = BrokerGateway(broker_config(options), self.storage, dedup,
                                     DeduplicationConfig(entries_interval=options.dedup_snapshot_entries),
                                     self._loaded)
        self.connections: dict[str, Connection] = {}
        self.producers: dict[str, ClientProducer] = {}
        self.consumers: dict[str, ClientConsumer] = {}
        #: producers and consumers the broker closed during the step: they come back at its end
        self.closed_by_broker: list[ClientProducer | ClientConsumer] = []
        #: every entry sent, and the message it carries
        self.messages: dict[bytes, Msg] = {}
        self.crashes = 0
        self.unloads = 0
        self.take_backs = 0
        self.errors = 0
        self.seeks = 0
        self.sends = 0
        self.refused = 0
        self.storage_steps = StorageSteps(self)

    @property
    def now_ms(self) -> int:
        return self.clock[0]

    # -- what the checker learns from storage ------------------------------------------
    def _loaded(self, topic: Topic) -> None:
        name = str(topic.name)
        self.rescan(topic)
        self.checker.restored(name, {sub: s.cursor.is_acked for sub, s in topic.subscriptions.items()})

    def rescan(self, topic: Topic) -> None:
        entries = {pos: msg_of(entry, self.messages) for pos, entry in topic.ledger.iter_entries(BEFORE_START)}
        self.checker.stored(str(topic.name), entries)

    def receipt(self, producer: ClientProducer, sequence_id: int, pos: Position) -> None:
        if producer.outstanding.pop(sequence_id, None) is not None:
            producer.receipted[sequence_id] = pos
            self.checker.receipted(full_name(producer.topic), producer.name, sequence_id)
        if not producer.outstanding:
            producer.broken = False

    def consumer_gone(self, consumer: ClientConsumer) -> None:
        """Its registration at the broker is gone: the checker returns what it held."""
        consumer.connected = False
        self.checker.left(full_name(consumer.topic), consumer.sub, consumer.name)
        consumer.inbox.clear()
        consumer.consumed = 0
        consumer.permits = 0

    # -- steps ----------------------------------------------------------------------------
    def apply(self, action: Action) -> bool:
        verb = action.verb.replace("-", "_")
        steps = self.storage_steps
        handler = getattr(steps, verb) if verb in StorageSteps.VERBS else getattr(self, "_" + verb)
        applied = bool(handler(*action.args))
        self._come_back()
        self.gateway.fire_timers()
        return applied

    def _come_back(self) -> None:
        """Clients the broker closed reconnect, as the official ones do."""
        while self.closed_by_broker:
            closed, self.closed_by_broker = self.closed_by_broker, []
            for client in closed:
                if isinstance(client, ClientProducer):
                    self._reopen_producer(client)
                elif not client.closed and not client.connected:
                    self._resubscribe(client)

    def _connect(self, name: str) -> bool:
        if name in self.connections:
            return False
        conn = self.connections[name] = Connection(self, name)
        self.gateway.connect(conn)
        return True

    def _reconnect(self, name: str) -> bool:
        conn = self.connections.get(name)
        if conn is None:
            return False
        for producer in conn.producers.values():
            producer.connected = False
        conn.dropping = True
        for consumer in conn.consumers.values():
            if consumer.connected:  # the broker lets them go one by one, as the checker must see it
                self.consumer_gone(consumer)
                self.gateway.close_consumer(conn, consumer.consumer_id)
        self.gateway.disconnect(conn)
        conn.dropping = False
        self.gateway.connect(conn)
        for producer in conn.producers.values():
            self._reopen_producer(producer)
        for consumer in conn.consumers.values():
            if not consumer.closed:
                self._resubscribe(consumer)
        return True

    # -- producers -------------------------------------------------------------------------
    def _producer(self, conn_name: str, name: str, topic: str) -> bool:
        conn = self.connections.get(conn_name)
        if conn is None or name in self.producers or topic not in TOPICS:
            return False
        producer = ClientProducer(name, topic, conn, conn.new_id())
        conn.producers[producer.producer_id] = producer
        self.producers[name] = producer
        self._reopen_producer(producer)
        return True

    def _reopen_producer(self, producer: ClientProducer) -> None:
        """Create the producer at the broker (again) and send what is outstanding, in order."""
        if producer.connected:
            self.gateway.close_producer(producer.conn, producer.producer_id)
            producer.connected = False
        try:
            self.gateway.create_producer(producer.conn, producer.producer_id, full_name(producer.topic), producer.name)
            producer.connected = True
        except BrokerError:
            return  # refused (the old registration lingers): the client retries later
        producer.broken = False
        if producer.outstanding:
            self._send_entries(producer, list(producer.outstanding))

    def _send_entries(self, producer: ClientProducer, sequence_ids: list[int]) -> None:
        """The client writes these sends in one go; the broker reads them as one read's worth."""
        self.sends += len(sequence_ids)
        sends = [(s, producer.outstanding[s][0]) for s in sequence_ids]
        ledger = self.storage_steps.ledger(producer.topic)
        take_backs = ledger.take_backs if ledger is not None else 0
        appended = self.gateway.send(producer.conn, producer.producer_id, sends)
        if ledger is not None and ledger.take_backs != take_backs:
            self.storage_steps.storage_changed(producer.topic)  # an append failed: the ledger is the truth
            return
        for sequence_id, pos in zip(sequence_ids, appended, strict=True):
            if pos is not None:
                self.checker.appended(full_name(producer.topic), pos, producer.outstanding[sequence_id][1])

    def _send(self, name: str, key: str, count: str = "1", delay_ms: str | None = None) -> bool:
        producer = self.producers.get(name)
        if producer is None or not producer.connected:
            return False
        first = producer.next_sequence_id
        for sequence_id in range(first, first + int(count)):
            metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=self.now_ms,
                                          partition_key=key)
            if delay_ms is not None:
                metadata.deliver_at_time = self.now_ms + int(delay_ms)
            entry = make_entry(metadata, f"{name}-{sequence_id}".encode())
            producer.outstanding[sequence_id] = (entry, msg_of(entry, self.messages))
        producer.next_sequence_id = first + int(count)
        self._send_entries(producer, list(range(first, producer.next_sequence_id)))
        return True

    def _resend(self, name: str) -> bool:
        producer = self.producers.get(name)
        if producer is None or (producer.connected and not producer.outstanding):
            return False
        self._reopen_producer(producer)
        return True

    def _close_producer(self, name: str) -> bool:
        producer = self.producers.get(name)
        if producer is None or not producer.connected or producer.outstanding:
            return False
        self.gateway.close_producer(producer.conn, producer.producer_id)
        producer.connected = False
        del producer.conn.producers[producer.producer_id]
        del self.producers[name]
        return True

    # -- consumers -------------------------------------------------------------------------
    def _subscribe(self, conn_name: str, name: str, topic: str, sub: str, queue: str) -> bool:
        conn = self.connections.get(conn_name)
        if conn is None or name in self.consumers or topic not in TOPICS or sub not in SUBSCRIPTIONS:
            return False
        consumer = ClientConsumer(name, topic, sub, conn, conn.new_id(), int(queue))
        conn.consumers[consumer.consumer_id] = consumer
        if not self._resubscribe(consumer):
            del conn.consumers[consumer.consumer_id]
            return True  # refused: the application got an error (an Exclusive subscription in use)
        self.consumers[name] = consumer
        return True

    def _resubscribe(self, consumer: ClientConsumer) -> bool:
        topic = full_name(consumer.topic)
        partition = int(consumer.topic.rsplit("-", 1)[1]) if "-partition-" in consumer.topic else -1
        self.gateway.topic(topic)  # the lookup loads it first
        if consumer.sub_type == EXCLUSIVE and self._in_use(consumer):
            try:  # the broker must refuse it and change nothing
                self.gateway.subscribe(consumer.conn, consumer.consumer_id, topic, consumer.sub,
                                       consumer.sub_type, consumer.name)
            except BrokerError:
                self.refused += 1
                return False
            raise BrokerViolation(f"{topic}/{consumer.sub}: {consumer.name} was let in beside the Exclusive "
                                  f"subscription's consumer")
        self.checker.joined(topic, consumer.sub, consumer.sub_type, partition, consumer.name)
        try:
            self.gateway.subscribe(consumer.conn, consumer.consumer_id, topic, consumer.sub, consumer.sub_type,
                                   consumer.name)
            consumer.connected = True
        except BrokerError as exc:
            self.checker.left(topic, consumer.sub, consumer.name)
            raise BrokerViolation(f"subscribe {consumer.name} to {topic}/{consumer.sub} refused: {exc}") from None
        consumer.consumed = 0
        self._flow(consumer, consumer.queue)
        return True

    def _in_use(self, consumer: ClientConsumer) -> bool:
        return any(c.connected and c.topic == consumer.topic and c.sub == consumer.sub
                   for c in self.consumers.values() if c is not consumer)

    def _flow(self, consumer: ClientConsumer, permits: int) -> None:
        if consumer.connected and permits > 0:
            consumer.permits += permits
            self.gateway.flow(consumer.conn, consumer.consumer_id, permits)

    def _consumer(self, name: str) -> ClientConsumer | None:
        consumer = self.consumers.get(name)
        return consumer if consumer is not None and consumer.connected else None

    def _receive(self, name: str, count: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None or not consumer.inbox:
            return False
        for _ in range(min(int(count), len(consumer.inbox))):
            consumer.received.append(consumer.inbox.popleft())
            consumer.consumed += 1
        if consumer.consumed >= max(1, consumer.queue // 2):
            permits, consumer.consumed = consumer.consumed, 0
            self._flow(consumer, permits)
        return True

    @staticmethod
    def _take(consumer: ClientConsumer, indexes: str) -> list[Position]:
        """The application is done with received entries (by their places in its list)."""
        wanted = {i for i in parse_indexes(indexes) if i < len(consumer.received)}
        picked = [d.pos for i, d in enumerate(consumer.received) if i in wanted]
        consumer.received = [d for i, d in enumerate(consumer.received) if i not in wanted]
        return picked

    def _ack(self, name: str, indexes: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None:
            return False
        positions = self._take(consumer, indexes)
        if not positions:
            return False
        self.checker.acked(full_name(consumer.topic), consumer.sub, name, positions)
        self._acked(self.gateway.ack(consumer.conn, consumer.consumer_id, positions, cumulative=False), positions)
        return True

    @staticmethod
    def _acked(refused: BrokerError | None, positions: list[Position]) -> None:
        """Every acknowledged entry was delivered, so it exists: a refusal means it was lost."""
        if refused is not None:
            raise BrokerViolation(f"{positions[0]} was delivered and is lost: its acknowledgement was refused "
                                  f"({refused.message})")

    def _ack_cum(self, name: str, index: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None or consumer.sub_type not in (EXCLUSIVE, FAILOVER) or int(index) >= len(consumer.received):
            return False
        upto = consumer.received[int(index)].pos
        consumer.received = [d for d in consumer.received if d.pos > upto]
        self.checker.acked_cumulative(full_name(consumer.topic), consumer.sub, name, upto)
        self._acked(self.gateway.ack(consumer.conn, consumer.consumer_id, [upto], cumulative=True), [upto])
        return True

    def _nack(self, name: str, indexes: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None:
            return False
        if consumer.sub_type in (EXCLUSIVE, FAILOVER):
            return self._redeliver(name)  # the official client asks for all on these types
        positions = self._take(consumer, indexes)
        if not positions:
            return False
        self.checker.sent_back(full_name(consumer.topic), consumer.sub, name, positions)
        self.gateway.redeliver(consumer.conn, consumer.consumer_id, positions)
        return True

    def _redeliver(self, name: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None:
            return False
        dropped = len(consumer.inbox)
        self.checker.sent_back(full_name(consumer.topic), consumer.sub, name,
                               [d.pos for d in (*consumer.received, *consumer.inbox)])
        consumer.received.clear()
        consumer.inbox.clear()
        self.gateway.redeliver(consumer.conn, consumer.consumer_id, None)
        self._flow(consumer, dropped)
        return True

    def _seek(self, name: str, target: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None:
            return False
        pos = Position(-1, -1) if target == "earliest" else Position.parse(target)
        mark = self.gateway.seek(consumer.conn, consumer.consumer_id, pos)
        if mark is None:
            return False
        self.seeks += 1
        self.checker.seeked(full_name(consumer.topic), consumer.sub, mark)
        for other in self.consumers.values():
            if other.topic == consumer.topic and other.sub == consumer.sub:
                other.received.clear()  # the application starts over from the seek
        return True

    def _close(self, name: str) -> bool:
        consumer = self._consumer(name)
        if consumer is None:
            return False
        consumer.closed = True
        self.consumer_gone(consumer)
        self.gateway.close_consumer(consumer.conn, consumer.consumer_id)
        del consumer.conn.consumers[consumer.consumer_id]
        del self.consumers[name]
        return True

    # -- time --------------------------------------------------------------------------------
    def _crash(self) -> bool:
        self.crashes += 1
        self.gateway.crash()
        for consumer in self.consumers.values():
            if consumer.connected:
                self.consumer_gone(consumer)
        for producer in self.producers.values():
            producer.connected = False
        for conn in self.connections.values():
            self.gateway.connect(conn)
        for producer in self.producers.values():
            self._reopen_producer(producer)
        for consumer in self.consumers.values():
            self._resubscribe(consumer)
        return True

    def _tick(self, ms: str) -> bool:
        self.clock[0] += int(ms)
        return True

    # -- views ---------------------------------------------------------------------------------
    def backlogs(self) -> dict[tuple[str, str], int]:
        found = {}
        for name in map(full_name, TOPICS):
            topic = self.gateway.topic(name)
            for sub_name, sub in topic.subscriptions.items():
                found[(name, sub_name)] = sub.backlog()
        return found
