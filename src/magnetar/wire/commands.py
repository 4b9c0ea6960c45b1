"""Builders for every command the broker sends to clients.

Each returns a complete BaseCommand: ``type`` and the matching sub-message are
both set, and so is every proto2 ``required`` field (the C++ client drops the
whole connection on a command with one missing). Positions are taken as Java
longs (signed, -1 allowed) and written as the uint64 the wire carries. Which
commands a client accepts is listed in shared/reference/protocol.md §4; the
Java counterpart is ``Commands`` / ``PulsarCommandSenderImpl``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar, cast

from magnetar.wire import pulsar_api_pb2 as pb

_U64_MASK = (1 << 64) - 1
#: request_id of broker-initiated CLOSE_PRODUCER / CLOSE_CONSUMER (Java's -1).
NO_REQUEST_ID = _U64_MASK

_T = pb.BaseCommand
_Lookup = TypeVar("_Lookup", pb.CommandLookupTopicResponse, pb.CommandPartitionedTopicMetadataResponse)


def to_uint64(value: int) -> int:
    """The uint64 wire form of a Java long (-1 becomes 2^64-1)."""
    return value & _U64_MASK


def _server_error(code: int) -> pb.ServerError:
    """Check that ``code`` (an int or IntEnum) is a ServerError the clients know."""
    pb.ServerError.Name(code)  # raises ValueError for an unknown code
    return cast(pb.ServerError, int(code))


def message_id_data(
    ledger_id: int, entry_id: int, partition: int | None = None, batch_index: int | None = None
) -> pb.MessageIdData:
    """A MessageIdData; partition and batch_index are set only when given."""
    data = pb.MessageIdData(ledgerId=to_uint64(ledger_id), entryId=to_uint64(entry_id))
    if partition is not None:
        data.partition = partition
    if batch_index is not None:
        data.batch_index = batch_index
    return data


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------


def connected(
    server_version: str,
    protocol_version: int,
    max_message_size: int,
    feature_flags: pb.FeatureFlags | None = None,
) -> pb.BaseCommand:
    body = pb.CommandConnected(
        server_version=server_version,
        protocol_version=protocol_version,
        max_message_size=max_message_size,
    )
    if feature_flags is not None:
        body.feature_flags.CopyFrom(feature_flags)
    return pb.BaseCommand(type=_T.CONNECTED, connected=body)


def auth_challenge(
    server_version: str, protocol_version: int, auth_method_name: str, auth_data: bytes
) -> pb.BaseCommand:
    challenge = pb.AuthData(auth_method_name=auth_method_name, auth_data=auth_data)
    body = pb.CommandAuthChallenge(
        server_version=server_version, challenge=challenge, protocol_version=protocol_version
    )
    return pb.BaseCommand(type=_T.AUTH_CHALLENGE, authChallenge=body)


def ping() -> pb.BaseCommand:
    return pb.BaseCommand(type=_T.PING, ping=pb.CommandPing())


def pong() -> pb.BaseCommand:
    return pb.BaseCommand(type=_T.PONG, pong=pb.CommandPong())


# ---------------------------------------------------------------------------
# Generic replies
# ---------------------------------------------------------------------------


def success(request_id: int, schema: pb.Schema | None = None) -> pb.BaseCommand:
    body = pb.CommandSuccess(request_id=to_uint64(request_id))
    if schema is not None:
        body.schema.CopyFrom(schema)
    return pb.BaseCommand(type=_T.SUCCESS, success=body)


def error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandError(request_id=to_uint64(request_id), error=_server_error(code), message=message)
    return pb.BaseCommand(type=_T.ERROR, error=body)


# ---------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------


def partitioned_metadata_response(request_id: int, partitions: int) -> pb.BaseCommand:
    body = pb.CommandPartitionedTopicMetadataResponse(
        request_id=to_uint64(request_id),
        partitions=partitions,
        response=pb.CommandPartitionedTopicMetadataResponse.Success,
    )
    return pb.BaseCommand(type=_T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=body)


def _failed_lookup(answer: type[_Lookup], request_id: int, code: int, message: str) -> _Lookup:
    """A failed lookup or partitioned-metadata answer (both say so the same way)."""
    return answer(request_id=to_uint64(request_id), response=answer.Failed, error=_server_error(code), message=message)


def partitioned_metadata_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = _failed_lookup(pb.CommandPartitionedTopicMetadataResponse, request_id, code, message)
    return pb.BaseCommand(type=_T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=body)


def lookup_response(request_id: int, broker_url: str, broker_url_tls: str | None = None) -> pb.BaseCommand:
    """Tell the client to connect to this broker (authoritative, never via a proxy)."""
    return _lookup_answer(pb.CommandLookupTopicResponse.Connect, request_id, broker_url, broker_url_tls)


def lookup_redirect(request_id: int, broker_url: str, broker_url_tls: str | None = None,
                    authoritative: bool = True) -> pb.BaseCommand:
    """Tell the client to look up again at another broker: authoritative, that broker serves
    the topic and answers for itself; not authoritative, that broker decides (the leader)."""
    return _lookup_answer(pb.CommandLookupTopicResponse.Redirect, request_id, broker_url, broker_url_tls,
                          authoritative)


def _lookup_answer(kind: int, request_id: int, broker_url: str, broker_url_tls: str | None,
                   authoritative: bool = True) -> pb.BaseCommand:
    body = pb.CommandLookupTopicResponse(request_id=to_uint64(request_id), brokerServiceUrl=broker_url,
                                         response=kind, authoritative=authoritative)  # type: ignore[arg-type]
    if broker_url_tls is not None:
        body.brokerServiceUrlTls = broker_url_tls
    return pb.BaseCommand(type=_T.LOOKUP_RESPONSE, lookupTopicResponse=body)


def lookup_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = _failed_lookup(pb.CommandLookupTopicResponse, request_id, code, message)
    return pb.BaseCommand(type=_T.LOOKUP_RESPONSE, lookupTopicResponse=body)


# ---------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int,
    schema_version: bytes | None = None,
    topic_epoch: int | None = None,
    producer_ready: bool | None = None,
) -> pb.BaseCommand:
    # Pulsar always sets schema_version (empty when the producer has no schema): the Java client
    # reads it unconditionally and drops the connection when it is missing
    body = pb.CommandProducerSuccess(
        request_id=to_uint64(request_id), producer_name=producer_name, last_sequence_id=last_sequence_id,
        schema_version=schema_version if schema_version is not None else b"",
    )
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    if producer_ready is not None:
        body.producer_ready = producer_ready
    return pb.BaseCommand(type=_T.PRODUCER_SUCCESS, producer_success=body)


def send_receipt(
    producer_id: int,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    highest_sequence_id: int | None = None,
) -> pb.BaseCommand:
    """Receipt for a persisted SEND; ledger_id = entry_id = -1 reports a duplicate."""
    body = pb.CommandSendReceipt(
        producer_id=to_uint64(producer_id),
        sequence_id=to_uint64(sequence_id),
        message_id=message_id_data(ledger_id, entry_id),
    )
    if highest_sequence_id is not None:
        body.highest_sequence_id = to_uint64(highest_sequence_id)
    return pb.BaseCommand(type=_T.SEND_RECEIPT, send_receipt=body)


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandSendError(
        producer_id=to_uint64(producer_id),
        sequence_id=to_uint64(sequence_id),
        error=_server_error(code),
        message=message,
    )
    return pb.BaseCommand(type=_T.SEND_ERROR, send_error=body)


def close_producer(producer_id: int, assigned: tuple[str | None, str | None] | None = None) -> pb.BaseCommand:
    """Broker-initiated close: the client reconnects the producer, straight to the
    ``assigned`` broker's service URLs (plain, TLS) when given (PIP-307), else by lookup."""
    body = pb.CommandCloseProducer(producer_id=to_uint64(producer_id), request_id=NO_REQUEST_ID)
    _assign(body, assigned)
    return pb.BaseCommand(type=_T.CLOSE_PRODUCER, close_producer=body)


def _assign(body: pb.CommandCloseProducer | pb.CommandCloseConsumer,
            assigned: tuple[str | None, str | None] | None) -> None:
    if assigned is not None:
        url, url_tls = assigned
        if url is not None:
            body.assignedBrokerServiceUrl = url
        if url_tls is not None:
            body.assignedBrokerServiceUrlTls = url_tls


# ---------------------------------------------------------------------------
# Consumers
# ---------------------------------------------------------------------------


def message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int = 0,
    ack_set: Iterable[int] | None = None,
    consumer_epoch: int | None = None,
) -> pb.BaseCommand:
    """The MESSAGE command that precedes a dispatched entry.

    ``redelivery_count`` is left out when 0, as Java does; ``ack_set`` (the
    BitSet words of batch indexes still to deliver) only when given.
    """
    body = pb.CommandMessage(
        consumer_id=to_uint64(consumer_id), message_id=message_id_data(ledger_id, entry_id, partition)
    )
    if redelivery_count:
        body.redelivery_count = redelivery_count
    if ack_set is not None:
        body.ack_set.extend(ack_set)
    if consumer_epoch is not None:
        body.consumer_epoch = consumer_epoch
    return pb.BaseCommand(type=_T.MESSAGE, message=body)


def close_consumer(consumer_id: int, assigned: tuple[str | None, str | None] | None = None) -> pb.BaseCommand:
    """Broker-initiated close: the client resubscribes (to ``assigned``, as for producers)."""
    body = pb.CommandCloseConsumer(consumer_id=to_uint64(consumer_id), request_id=NO_REQUEST_ID)
    _assign(body, assigned)
    return pb.BaseCommand(type=_T.CLOSE_CONSUMER, close_consumer=body)


def reached_end_of_topic(consumer_id: int) -> pb.BaseCommand:
    """The consumer's topic was terminated and it has received every message."""
    body = pb.CommandReachedEndOfTopic(consumer_id=to_uint64(consumer_id))
    return pb.BaseCommand(type=_T.REACHED_END_OF_TOPIC, reachedEndOfTopic=body)


def active_consumer_change(consumer_id: int, is_active: bool) -> pb.BaseCommand:
    body = pb.CommandActiveConsumerChange(consumer_id=to_uint64(consumer_id), is_active=is_active)
    return pb.BaseCommand(type=_T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=body)


def ack_response(
    consumer_id: int, request_id: int, error: int | None = None, message: str | None = None
) -> pb.BaseCommand:
    """Reply to an ACK that carried a request_id; no ``error`` means success."""
    body = pb.CommandAckResponse(consumer_id=to_uint64(consumer_id), request_id=to_uint64(request_id))
    if error is not None:
        body.error = _server_error(error)
        body.message = message or ""
    elif message is not None:
        body.message = message
    return pb.BaseCommand(type=_T.ACK_RESPONSE, ackResponse=body)


def get_last_message_id_response(
    request_id: int,
    ledger: int,
    entry: int,
    partition: int,
    batch_index: int,
    mark_delete: tuple[int, int] | None = None,
) -> pb.BaseCommand:
    """Last entry of the topic (entry = -1 when empty) and the cursor's mark-delete position."""
    body = pb.CommandGetLastMessageIdResponse(
        request_id=to_uint64(request_id),
        last_message_id=message_id_data(ledger, entry, partition, batch_index),
    )
    if mark_delete is not None:
        body.consumer_mark_delete_position.CopyFrom(message_id_data(*mark_delete))
    return pb.BaseCommand(type=_T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=body)


def consumer_stats_response(
    request_id: int,
    *,
    msgRateOut: float = 0.0,
    msgThroughputOut: float = 0.0,
    msgRateRedeliver: float = 0.0,
    consumerName: str = "",
    availablePermits: int = 0,
    unackedMessages: int = 0,
    blockedConsumerOnUnackedMsgs: bool = False,
    address: str = "",
    connectedSince: str = "",
    type: str = "",
    msgRateExpired: float = 0.0,
    msgBacklog: int = 0,
    messageAckRate: float = 0.0,
) -> pb.BaseCommand:
    """Stats of one consumer; keywords carry the wire field names.

    ``type`` is the subscription type as text ("Exclusive", "Shared", ...).
    Permits may run negative in the broker; the wire field is unsigned.
    """
    body = pb.CommandConsumerStatsResponse(
        request_id=to_uint64(request_id),
        msgRateOut=msgRateOut,
        msgThroughputOut=msgThroughputOut,
        msgRateRedeliver=msgRateRedeliver,
        consumerName=consumerName,
        availablePermits=max(availablePermits, 0),
        unackedMessages=unackedMessages,
        blockedConsumerOnUnackedMsgs=blockedConsumerOnUnackedMsgs,
        address=address,
        connectedSince=connectedSince,
        type=type,
        msgRateExpired=msgRateExpired,
        msgBacklog=msgBacklog,
        messageAckRate=messageAckRate,
    )
    return pb.BaseCommand(type=_T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=body)


def consumer_stats_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandConsumerStatsResponse(
        request_id=to_uint64(request_id), error_code=_server_error(code), error_message=message
    )
    return pb.BaseCommand(type=_T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=body)


# ---------------------------------------------------------------------------
# Namespaces and schemas
# ---------------------------------------------------------------------------


def topics_of_namespace_response(
    request_id: int, topics: Iterable[str], topics_hash: str | None = None, filtered: bool = False
) -> pb.BaseCommand:
    body = pb.CommandGetTopicsOfNamespaceResponse(request_id=to_uint64(request_id), topics=topics)
    if topics_hash is not None:
        body.topics_hash = topics_hash
    if filtered:
        body.filtered = True
    return pb.BaseCommand(type=_T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=body)


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> pb.BaseCommand:
    body = pb.CommandGetSchemaResponse(
        request_id=to_uint64(request_id), schema=schema, schema_version=schema_version
    )
    return pb.BaseCommand(type=_T.GET_SCHEMA_RESPONSE, getSchemaResponse=body)


def get_schema_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    """No schema (TopicNotFound) or a bad request; the C++ client expects the former quietly."""
    body = pb.CommandGetSchemaResponse(
        request_id=to_uint64(request_id), error_code=_server_error(code), error_message=message
    )
    return pb.BaseCommand(type=_T.GET_SCHEMA_RESPONSE, getSchemaResponse=body)


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> pb.BaseCommand:
    """Java clients only: the C++ client never asks and drops a connection that gets one."""
    body = pb.CommandGetOrCreateSchemaResponse(
        request_id=to_uint64(request_id), schema_version=schema_version
    )
    return pb.BaseCommand(type=_T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=body)


def get_or_create_schema_error(request_id: int, code: int, message: str) -> pb.BaseCommand:
    body = pb.CommandGetOrCreateSchemaResponse(
        request_id=to_uint64(request_id), error_code=_server_error(code), error_message=message
    )
    return pb.BaseCommand(type=_T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=body)
