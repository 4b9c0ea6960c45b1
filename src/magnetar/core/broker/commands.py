"""The binary protocol's commands, decided: one function per command a client sends
once connected (CONNECT, keep-alive and authentication stay with the connection).

Each decides what the command does to topics, producers, subscriptions and consumers,
and answers with the reply the official clients expect (shared/reference/protocol.md).
What it needs of the world goes through two narrow seams: the connection the command
came on (:class:`ClientConnection`, frames out and a topic load) and the broker shell
(:class:`~magnetar.core.broker.command_shell.CommandShell`: durability of metadata and
cursors, the time); the simulation implements both as the server does.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Protocol

from magnetar.core.broker.command_shell import CommandShell
from magnetar.core.errors import (
    AuthorizationError,
    BrokerError,
    ConsumerBusy,
    MetadataError,
    NotAllowed,
    ProducerBusy,
    ServerError,
    ServiceNotReady,
    TopicNotFound,
)
from magnetar.core.names import TopicName
from magnetar.core.policies import limits
from magnetar.core.positions import BEFORE_START, Position, to_signed64
from magnetar.core.schemas import versions as schema_versions
from magnetar.core.schemas.topic_schemas import decode_version, encode_version
from magnetar.core.schemas.wire_schemas import schema_from_wire, schema_to_wire
from magnetar.core.security.authorization import Operation
from magnetar.core.sinks import ConsumerSink, ProducerSink
from magnetar.core.stats import iso_time
from magnetar.core.subscriptions import cursor_moves
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import admission
from magnetar.core.topics.producer import AccessMode, Producer
from magnetar.core.topics.topic import Topic, topic_of
from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import Frame

T = pb.BaseCommand
SUB_TYPE_NAMES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}


class ClientConnection(ProducerSink, ConsumerSink, Protocol):
    """What a handler uses of the connection its command came on (the server's
    ``ClientConnection``; a Protocol here so handlers do not import it back)."""

    address: str
    client_version: str
    producers: dict[int, Producer]
    producer_topics: dict[int, Topic]
    producer_requests: dict[int, int]
    consumers: dict[int, tuple[Consumer, Subscription]]
    #: consumer id -> the SUBSCRIBE whose answer waits for a write (its request id)
    subscribing: dict[int, int]

    @property
    def broker(self) -> CommandShell: ...

    @property
    def role(self) -> str | None:
        """The authenticated role, None while authentication is off."""

    def write_command(self, cmd: pb.BaseCommand) -> None: ...

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None: ...

    def reply_when_done(self, work: Any, request: pb.BaseCommand,
                        reply: pb.BaseCommand) -> None: ...

    def drop_producer(self, producer_id: int) -> None: ...

    def with_topic(self, name: TopicName, create: bool, request: pb.BaseCommand,
                   then: Callable[[Topic], None]) -> None:
        """``then(topic)`` once the topic is loaded (now, if it is; the connection's later
        commands wait meanwhile); a failure answers ``request``."""

    @property
    def closed_producers(self) -> Container[int]:
        """Producer ids the broker closed (an unload), not the client."""



Handler = Callable[[ClientConnection, Frame], None]


def _topic_name(text: str) -> TopicName:
    return TopicName.parse(text)


def _authorize(conn: ClientConnection, name: TopicName, operation: Operation, what: str) -> None:
    """Pulsar's check and message for a command on a topic (``AuthorizationError``); a role
    that may not act on a namespace that does not exist is told ``TopicNotFound`` first,
    with Pulsar's message (the role learns nothing of namespaces it may not use)."""
    if not conn.broker.access.topic_allowed(conn.role, operation, name):
        if conn.broker.access.missing_part(name.namespace_name) is not None:
            raise TopicNotFound(f"Tenant or namespace or topic does not exist: {name.namespace_name}")
        raise AuthorizationError(f"Client is not authorized to {what}")


# -- lookups ------------------------------------------------------------------------
def partitioned_metadata(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.partitionMetadata
    name = _topic_name(req.topic)
    _authorize(conn, name, Operation.LOOKUP, "Get Partition Metadata")
    partitions = conn.broker.records.partitioned_metadata(name)
    conn.write_command(commands.partitioned_metadata_response(req.request_id, partitions))


def lookup(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.lookupTopic
    _authorize(conn, _topic_name(req.topic), Operation.LOOKUP, "Lookup")
    listener = req.advertised_listener_name if req.HasField("advertised_listener_name") else None
    conn.write_command(commands.lookup_response(req.request_id, *conn.broker.addresses.lookup_urls(listener)))


def topics_of_namespace(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.getTopicsOfNamespace
    if not conn.broker.access.namespace_allowed(conn.role, Operation.LOOKUP, req.namespace):
        raise AuthorizationError("Client is not authorized to GetTopicsOfNamespace")
    topics = conn.broker.records.list_topics(req.namespace, int(req.mode))
    conn.write_command(commands.topics_of_namespace_response(req.request_id, topics))


# -- producers -------------------------------------------------------------------------
def producer(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.producer
    existing = conn.producers.get(req.producer_id)
    if existing is not None:
        topic = conn.producer_topics[req.producer_id]
        conn.write_command(commands.producer_success(
            req.request_id, existing.producer_name, admission.last_sequence_id(topic, existing.producer_name)))
        return
    broker = conn.broker
    changes = broker.metadata_changes
    if not broker.ready:
        raise ServiceNotReady("Broker is starting up or shutting down")
    limits.check_connection_clients(len(conn.producers) + len(conn.consumers), broker.config)
    topic_name = _topic_name(req.topic)
    _authorize(conn, topic_name, Operation.PRODUCE, "Produce")
    conn.with_topic(topic_name, True, frame.command, lambda topic: _attach_producer(conn, frame, topic, changes))


def _attach_producer(conn: ClientConnection, frame: Frame, topic: Topic, changes: int) -> None:
    req = frame.command.producer
    broker = conn.broker
    admission.check_producer(topic, broker.policies, conn.broker.now_ms())
    user_named = req.producer_name != ""
    name = req.producer_name if user_named else broker.generate_producer_name()
    prod = Producer(
        producer_id=req.producer_id, producer_name=name, sink=conn,
        access_mode=AccessMode(req.producer_access_mode), epoch=req.epoch,
        user_provided_name=(req.user_provided_producer_name if req.HasField("user_provided_producer_name")
                            else user_named),
        address=conn.address, client_version=conn.client_version, connected_since=iso_time(broker.now_ms()),
        metadata={kv.key: kv.value for kv in req.metadata},
    )
    initial_subscription = req.initial_subscription_name if req.HasField("initial_subscription_name") else ""
    if initial_subscription and initial_subscription not in topic.subscriptions \
            and not broker.config.allowAutoSubscriptionCreation:
        raise NotAllowed("Could not create the initial subscription due to the auto subscription creation "
                         "is not allowed.")
    _replace_stale_producer(topic, prod)
    if req.HasField("topic_epoch") and prod.exclusive and req.topic_epoch < topic.topic_epoch \
            and prod.access_mode != AccessMode.ExclusiveWithFencing:
        from magnetar.core.errors import ProducerFenced
        raise ProducerFenced(f"Topic epoch {req.topic_epoch} is older than the topic's {topic.topic_epoch}")
    schema_version = broker.topic_schemas.producer_version(
        topic, schema_from_wire(req.schema) if req.HasField("schema") else None, conn.broker.now_ms())
    ready = topic.add_producer(prod)
    conn.producers[req.producer_id] = prod
    conn.producer_topics[req.producer_id] = topic
    conn.producer_requests[req.producer_id] = req.request_id
    if initial_subscription:
        broker.ensure_subscription(topic, initial_subscription)
    epoch = topic.topic_epoch if prod.exclusive else None
    reply = commands.producer_success(
        req.request_id, name, admission.last_sequence_id(topic, name), schema_version=schema_version,
        topic_epoch=epoch, producer_ready=ready if not ready else None)
    if schema_version is None and broker.metadata_changes == changes:
        conn.write_command(reply)
    else:  # the schema version it names, or the topic it created, must be durable first
        conn.reply_when_done(broker.metadata_durable(), frame.command, reply)


def closed_while_answering(conn: ClientConnection, request: pb.BaseCommand) -> bool:
    """A PRODUCER or SUBSCRIBE whose producer or consumer the broker closed (its topic
    unloaded) while the answer waited for a write: the client was told to reconnect, and a
    late success would make it take the closed one for ready. It gets a retriable error.
    A SUBSCRIBE's answer is settled here: a later SUBSCRIBE of the consumer id is answered
    at once from now on."""
    if request.type == T.PRODUCER:
        producer_id = request.producer.producer_id
        return producer_id not in conn.producers and producer_id in conn.closed_producers
    if request.type == T.SUBSCRIBE:
        consumer_id, request_id = request.subscribe.consumer_id, request.subscribe.request_id
        if conn.subscribing.get(consumer_id) != request_id:
            return True  # its consumer was closed, and another SUBSCRIBE made the one there now
        del conn.subscribing[consumer_id]
        return consumer_id not in conn.consumers
    return False


def _replace_stale_producer(topic: Topic, prod: Producer) -> None:
    """A reconnect of the same logical producer replaces its old registration."""
    old = topic.producers.get(prod.producer_name)
    if old is None:
        return
    if old.sink is prod.sink and old.producer_id == prod.producer_id and prod.epoch > old.epoch:
        topic.remove_producer(old)
        return
    raise ProducerBusy(f"Producer with name '{prod.producer_name}' is already connected to topic {topic.name}")


def close_producer(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.close_producer
    conn.drop_producer(req.producer_id)
    conn.write_command(commands.success(req.request_id))


# -- consumers ----------------------------------------------------------------------------
def subscribe(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.subscribe
    if req.consumer_id in conn.consumers:
        if req.consumer_id in conn.subscribing:
            # the client clears its queue and grants its permits anew on each SUCCESS, so a
            # second one while the first is still to come would lose what was sent between
            raise ServiceNotReady("Consumer is already present on the connection")
        conn.write_command(commands.success(req.request_id))
        return
    broker = conn.broker
    if not broker.ready:
        raise ServiceNotReady("Broker is starting up or shutting down")
    if not req.subscription:
        raise ProducerBusy("Empty subscription name")
    limits.check_connection_clients(len(conn.producers) + len(conn.consumers), broker.config)
    name = _topic_name(req.topic)
    _authorize(conn, name, Operation.CONSUME, "subscribe")
    refusal = conn.broker.access.subscription_refusal(conn.role, name, req.subscription)
    if refusal is not None:
        raise AuthorizationError(refusal)
    create = not req.HasField("force_topic_creation") or req.force_topic_creation
    conn.with_topic(name, create, frame.command, lambda topic: _attach_consumer(conn, frame, topic))


def _attach_consumer(conn: ClientConnection, frame: Frame, topic: Topic) -> None:
    req = frame.command.subscribe
    broker = conn.broker
    sub_type = SUB_TYPE_NAMES.get(int(req.subType))
    if sub_type is None:
        raise NotAllowed(f"Unknown subscription type {req.subType}")
    admission.check_consumer(topic, req.subscription, sub_type, broker.policies)
    schema = schema_from_wire(req.schema) if req.HasField("schema") else None
    consumer = Consumer(
        consumer_id=req.consumer_id, consumer_name=req.consumer_name, sink=conn, sub_type=sub_type,
        priority_level=req.priority_level, address=conn.address, client_version=conn.client_version,
        connected_since=iso_time(broker.now_ms()), metadata={kv.key: kv.value for kv in req.metadata},
        key_shared_meta=req.keySharedMeta if req.HasField("keySharedMeta") else None,
        schema_type=schema.schema_type if schema is not None else "NONE",
    )
    if schema is not None:
        broker.topic_schemas.check_consumer(topic, schema, conn.broker.now_ms())
    durable = req.durable if req.HasField("durable") else True
    start = _start_position(req) if not durable else None
    now = conn.broker.now_ms()
    sub = topic.subscribe(
        req.subscription, consumer, now, durable=durable,
        initial_earliest=req.initialPosition == pb.CommandSubscribe.Earliest, start=start,
        create=broker.config.allowAutoSubscriptionCreation, read_compacted=req.read_compacted,
    )
    conn.consumers[req.consumer_id] = (consumer, sub)
    broker.apply_dispatch_rates(topic)
    if req.start_message_rollback_duration_sec > 0 and len(sub.consumers) == 1:
        cursor_moves.reset_cursor_by_time(sub, now - req.start_message_rollback_duration_sec * 1000, now)
    if req.subscription_properties and not sub.properties:
        sub.properties = {kv.key: kv.value for kv in req.subscription_properties}
    if not durable and schema is None:
        conn.write_command(commands.success(req.request_id))
        return
    conn.subscribing[req.consumer_id] = req.request_id
    if not durable:  # a schema it gave the topic is stored first
        conn.reply_when_done(broker.metadata_durable(), frame.command, commands.success(req.request_id))
        return
    # A new subscription is stored before SUCCESS: one a crash could forget would come
    # back at Latest and skip every message published in between. The write is a
    # commit with fsync, so it runs off the event loop and SUCCESS follows it.
    conn.reply_when_done(broker.cursors_durable(topic), frame.command, commands.success(req.request_id))


def _start_position(req: pb.CommandSubscribe) -> Position | None:
    if not req.HasField("start_message_id"):
        return None
    mid = req.start_message_id
    return Position(to_signed64(mid.ledgerId), to_signed64(mid.entryId))


def _consumer(conn: ClientConnection, consumer_id: int) -> tuple[Consumer, Subscription]:
    found = conn.consumers.get(consumer_id)
    if found is None:
        raise MetadataError("Consumer not found")
    return found


def flow(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.flow
    found = conn.consumers.get(req.consumer_id)
    if found is not None:
        consumer, sub = found
        sub.dispatcher.on_flow(consumer, req.messagePermits, conn.broker.now_ms())
        topic_of(sub).tell_end_of_topic()


def ack(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.ack
    found = conn.consumers.get(req.consumer_id)
    if found is None:
        if req.HasField("request_id"):
            conn.write_command(commands.ack_response(req.consumer_id, req.request_id))
        return
    consumer, sub = found
    acks = [(Position(to_signed64(m.ledgerId), to_signed64(m.entryId)), list(m.ack_set) or None)
            for m in req.message_id]
    if acks:
        sub.acknowledge(consumer, req.ack_type == pb.CommandAck.Cumulative, acks, conn.broker.now_ms())
        topic_of(sub).tell_end_of_topic()
    if req.HasField("request_id"):
        conn.write_command(commands.ack_response(req.consumer_id, req.request_id))


def redeliver(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.redeliverUnacknowledgedMessages
    found = conn.consumers.get(req.consumer_id)
    if found is None:
        return
    consumer, sub = found
    positions = [Position(to_signed64(m.ledgerId), to_signed64(m.entryId)) for m in req.message_ids] or None
    sub.redeliver(consumer, positions, conn.broker.now_ms())


def unsubscribe(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.unsubscribe
    consumer, sub = _consumer(conn, req.consumer_id)
    others = [c for c in sub.consumers if c is not consumer]
    if others and not req.force:
        raise ConsumerBusy(f"Subscription {sub.name} has other connected consumers")
    conn.consumers.pop(req.consumer_id, None)
    conn.broker.delete_subscription(topic_of(sub), sub.name)
    # the cursor and the delayed index's snapshots are deleted on the writer thread
    conn.reply_when_done(conn.broker.metadata_durable(), frame.command, commands.success(req.request_id))


def seek(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.seek
    _, sub = _consumer(conn, req.consumer_id)
    if req.HasField("message_id"):
        target = Position(to_signed64(req.message_id.ledgerId), to_signed64(req.message_id.entryId))
        sub.reset_cursor(sub.topic.position_before(target), conn.broker.now_ms())
    elif req.HasField("message_publish_time"):
        cursor_moves.reset_cursor_by_time(sub, req.message_publish_time, conn.broker.now_ms())
    else:
        raise MetadataError("SEEK needs a message id or a publish time")
    conn.write_command(commands.success(req.request_id))


def get_last_message_id(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.getLastMessageId
    _, sub = _consumer(conn, req.consumer_id)
    topic = topic_of(sub)
    # a readCompacted consumer reads through the compacted view: its last entry counts
    last, batch_index = cursor_moves.last_message_id(sub.source)
    mark = sub.cursor.mark_delete
    conn.write_command(commands.get_last_message_id_response(
        req.request_id, last.ledger_id, last.entry_id, topic.partition_index, batch_index,
        mark_delete=(mark.ledger_id, mark.entry_id) if mark.ledger_id >= 0 else None))


def close_consumer(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.close_consumer
    found = conn.consumers.pop(req.consumer_id, None)
    if found is not None:
        consumer, sub = found
        topic_of(sub).remove_consumer(sub, consumer, conn.broker.now_ms())
    conn.write_command(commands.success(req.request_id))


def consumer_stats(conn: ClientConnection, frame: Frame) -> None:
    req = frame.command.consumerStats
    found = conn.consumers.get(req.consumer_id)
    if found is None:
        from magnetar.core.errors import ServerError
        conn.write_command(commands.consumer_stats_error(req.request_id, ServerError.ConsumerNotFound,
                                                         "Consumer not found"))
        return
    consumer, sub = found
    conn.write_command(_consumer_stats(req.request_id, consumer, sub, conn.broker.now_ms()))


def _consumer_stats(request_id: int, consumer: Consumer, sub: Subscription, now: int) -> pb.BaseCommand:
    rate, throughput = consumer.msg_out.rate(now)
    return commands.consumer_stats_response(
        request_id, msgRateOut=rate, msgThroughputOut=throughput,
        msgRateRedeliver=consumer.redeliver.rate(now)[0], consumerName=consumer.consumer_name,
        availablePermits=max(consumer.permits, 0), unackedMessages=consumer.unacked_messages,
        blockedConsumerOnUnackedMsgs=consumer.blocked_on_unacked, address=consumer.address,
        connectedSince=consumer.connected_since, type=sub.sub_type, msgBacklog=sub.backlog())


# -- schemas --------------------------------------------------------------------------------
def get_schema(conn: ClientConnection, frame: Frame) -> None:
    """Pulsar's ``handleGetSchema``: the latest (or the asked) live version, else
    TopicNotFound "Topic not found or no-schema"."""
    req = frame.command.getSchema
    name = _topic_name(req.topic)
    _authorize(conn, name, Operation.LOOKUP, "get schema")
    history = conn.broker.schemas.history(name)
    try:
        found = (schema_versions.latest(history) if not req.HasField("schema_version")
                 else schema_versions.version_of(history, decode_version(req.schema_version)))
    except ValueError as exc:
        conn.write_command(commands.get_schema_error(req.request_id, ServerError.UnknownError, str(exc)))
        return
    if found is None:
        conn.write_command(commands.get_schema_error(req.request_id, ServerError.TopicNotFound,
                                                     "Topic not found or no-schema"))
        return
    conn.write_command(commands.get_schema_response(req.request_id, schema_to_wire(name, found.schema),
                                                    encode_version(found.version)))


def get_or_create_schema(conn: ClientConnection, frame: Frame) -> None:
    """Pulsar's ``handleGetOrCreateSchema``: on an existing topic (loaded first, its store
    calls off the event loop), the version of the schema, added if new and allowed (a NONE
    schema asks only whether schema-less producers may write); errors are answered in
    GET_OR_CREATE_SCHEMA_RESPONSE."""
    req = frame.command.getOrCreateSchema
    name = _topic_name(req.topic)
    _authorize(conn, name, Operation.PRODUCE, "Produce")
    conn.with_topic(name, False, frame.command, lambda topic: _schema_version(conn, frame, topic))


def _schema_version(conn: ClientConnection, frame: Frame, topic: Topic) -> None:
    req = frame.command.getOrCreateSchema
    schema = schema_from_wire(req.schema)
    version = conn.broker.topic_schemas.producer_version(topic, None if schema.schema_type == "NONE" else schema,
                                                         conn.broker.now_ms())
    conn.reply_when_done(conn.broker.metadata_durable(), frame.command,
                         commands.get_or_create_schema_response(req.request_id, version or b""))


HANDLERS: dict[int, Handler] = {
    T.PARTITIONED_METADATA: partitioned_metadata,
    T.LOOKUP: lookup,
    T.GET_TOPICS_OF_NAMESPACE: topics_of_namespace,
    T.PRODUCER: producer,
    T.CLOSE_PRODUCER: close_producer,
    T.SUBSCRIBE: subscribe,
    T.FLOW: flow,
    T.ACK: ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: redeliver,
    T.UNSUBSCRIBE: unsubscribe,
    T.SEEK: seek,
    T.GET_LAST_MESSAGE_ID: get_last_message_id,
    T.CLOSE_CONSUMER: close_consumer,
    T.CONSUMER_STATS: consumer_stats,
    T.GET_SCHEMA: get_schema,
    T.GET_OR_CREATE_SCHEMA: get_or_create_schema,
}
__all__ = ["HANDLERS", "BrokerError", "BEFORE_START"]
