"""Broker-to-client command builders and the .proto schema (magnetar.wire.commands)."""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import FrameDecoder, encode_command

U64_MAX = (1 << 64) - 1
T = pb.BaseCommand

STRING_SCHEMA = pb.Schema(name="STRING", schema_data=b"null", type=pb.Schema.String)

BUILDERS: list[tuple[Callable[[], pb.BaseCommand], int, str]] = [
    (lambda: commands.connected("magnetar", 20, 5242880), T.CONNECTED, "connected"),
    (
        lambda: commands.auth_challenge("magnetar", 20, "token", b"PulsarAuthRefresh"),
        T.AUTH_CHALLENGE,
        "authChallenge",
    ),
    (commands.ping, T.PING, "ping"),
    (commands.pong, T.PONG, "pong"),
    (lambda: commands.success(1), T.SUCCESS, "success"),
    (lambda: commands.error(1, pb.NotAllowedError, "no"), T.ERROR, "error"),
    (
        lambda: commands.partitioned_metadata_response(1, 0),
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
    ),
    (
        lambda: commands.partitioned_metadata_error(1, pb.TopicNotFound, "gone"),
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
    ),
    (
        lambda: commands.lookup_response(1, "pulsar://localhost:6650"),
        T.LOOKUP_RESPONSE,
        "lookupTopicResponse",
    ),
    (lambda: commands.lookup_error(1, pb.ServiceNotReady, "busy"), T.LOOKUP_RESPONSE, "lookupTopicResponse"),
    (lambda: commands.producer_success(1, "standalone-0-1", -1), T.PRODUCER_SUCCESS, "producer_success"),
    (lambda: commands.send_receipt(0, 0, 1, 0), T.SEND_RECEIPT, "send_receipt"),
    (lambda: commands.send_error(0, 0, pb.ChecksumError, "bad crc"), T.SEND_ERROR, "send_error"),
    (lambda: commands.close_producer(0), T.CLOSE_PRODUCER, "close_producer"),
    (lambda: commands.message(0, 1, 0, -1), T.MESSAGE, "message"),
    (lambda: commands.close_consumer(0), T.CLOSE_CONSUMER, "close_consumer"),
    (lambda: commands.active_consumer_change(0, True), T.ACTIVE_CONSUMER_CHANGE, "active_consumer_change"),
    (lambda: commands.ack_response(0, 1), T.ACK_RESPONSE, "ackResponse"),
    (
        lambda: commands.get_last_message_id_response(1, 3, 4, -1, -1),
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        "getLastMessageIdResponse",
    ),
    (lambda: commands.consumer_stats_response(1), T.CONSUMER_STATS_RESPONSE, "consumerStatsResponse"),
    (
        lambda: commands.consumer_stats_error(1, pb.ConsumerNotFound, "who?"),
        T.CONSUMER_STATS_RESPONSE,
        "consumerStatsResponse",
    ),
    (
        lambda: commands.topics_of_namespace_response(1, ["persistent://public/default/t"]),
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        "getTopicsOfNamespaceResponse",
    ),
    (
        lambda: commands.get_schema_response(1, STRING_SCHEMA, (0).to_bytes(8, "big")),
        T.GET_SCHEMA_RESPONSE,
        "getSchemaResponse",
    ),
    (
        lambda: commands.get_schema_error(1, pb.TopicNotFound, "none"),
        T.GET_SCHEMA_RESPONSE,
        "getSchemaResponse",
    ),
    (
        lambda: commands.get_or_create_schema_response(1, (2).to_bytes(8, "big")),
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        "getOrCreateSchemaResponse",
    ),
    (
        lambda: commands.get_or_create_schema_error(1, pb.IncompatibleSchema, "no"),
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        "getOrCreateSchemaResponse",
    ),
]

#: Commands the C++ 4.2.0 client accepts once connected (anything else drops the connection).
CPP_ACCEPTED = {
    T.MESSAGE, T.SEND_RECEIPT, T.SEND_ERROR, T.SUCCESS, T.PARTITIONED_METADATA_RESPONSE,
    T.CONSUMER_STATS_RESPONSE, T.LOOKUP_RESPONSE, T.PRODUCER_SUCCESS, T.ERROR, T.TOPIC_MIGRATED,
    T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.PING, T.PONG, T.AUTH_CHALLENGE, T.ACTIVE_CONSUMER_CHANGE,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE,
    T.ACK_RESPONSE,
}  # fmt: skip


def round_trip(command: pb.BaseCommand) -> pb.BaseCommand:
    (frame,) = FrameDecoder(1 << 20).feed(encode_command(command))
    return frame.command


# ---------------------------------------------------------------------------
# Every builder
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "command_type", "field"), BUILDERS, ids=[b[2] + str(i) for i, b in enumerate(BUILDERS)]
)
def test_builder_sets_type_and_sub_message(
    build: Callable[[], pb.BaseCommand], command_type: int, field: str
) -> None:
    command = build()
    assert command.type == command_type
    assert [descriptor.name for descriptor, _ in command.ListFields()] == ["type", field]


@pytest.mark.parametrize(
    ("build", "command_type", "field"), BUILDERS, ids=[b[2] + str(i) for i, b in enumerate(BUILDERS)]
)
def test_builder_fills_every_required_field(
    build: Callable[[], pb.BaseCommand], command_type: int, field: str
) -> None:
    command = build()
    assert command.IsInitialized(), command.FindInitializationErrors()
    assert round_trip(command) == command


def test_builders_only_send_what_the_cpp_client_accepts() -> None:
    # CONNECTED comes before the handshake ends; GET_OR_CREATE_SCHEMA answers Java clients only.
    exempt = {T.CONNECTED, T.GET_OR_CREATE_SCHEMA_RESPONSE}
    assert {command_type for _, command_type, _ in BUILDERS} - exempt <= CPP_ACCEPTED


# ---------------------------------------------------------------------------
# Specific rules
# ---------------------------------------------------------------------------


def test_connected() -> None:
    body = commands.connected("magnetar-0.1", 20, 5242880).connected
    assert (body.server_version, body.protocol_version, body.max_message_size) == (
        "magnetar-0.1",
        20,
        5242880,
    )
    assert not body.HasField("feature_flags")
    flags = pb.FeatureFlags(supports_get_partitioned_metadata_without_auto_creation=True)
    with_flags = commands.connected("m", 21, 1, feature_flags=flags).connected
    assert with_flags.feature_flags.supports_get_partitioned_metadata_without_auto_creation
    assert not with_flags.feature_flags.HasField("supports_topic_watchers")


def test_error_message_is_present_even_when_empty() -> None:
    body = commands.error(5, pb.UnknownError, "").error
    assert body.HasField("message") and body.HasField("error")
    assert body.error == pb.UnknownError


def test_partitioned_metadata_response_always_says_success_and_partitions() -> None:
    body = round_trip(commands.partitioned_metadata_response(3, 0)).partitionMetadataResponse
    assert body.HasField("response") and body.response == pb.CommandPartitionedTopicMetadataResponse.Success
    assert body.HasField("partitions") and body.partitions == 0
    assert body.request_id == 3


def test_partitioned_metadata_error() -> None:
    body = commands.partitioned_metadata_error(3, pb.TopicNotFound, "gone").partitionMetadataResponse
    assert body.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert (body.error, body.message) == (pb.TopicNotFound, "gone")
    assert not body.HasField("partitions")


def test_lookup_response_connects_authoritatively() -> None:
    body = round_trip(
        commands.lookup_response(4, "pulsar://h:6650", "pulsar+ssl://h:6651")
    ).lookupTopicResponse
    assert body.HasField("response") and body.response == pb.CommandLookupTopicResponse.Connect
    assert body.authoritative is True
    assert (body.brokerServiceUrl, body.brokerServiceUrlTls) == ("pulsar://h:6650", "pulsar+ssl://h:6651")
    assert not body.proxy_through_service_url
    assert not commands.lookup_response(4, "pulsar://h:6650").lookupTopicResponse.HasField(
        "brokerServiceUrlTls"
    )


def test_lookup_error() -> None:
    body = commands.lookup_error(4, pb.TooManyRequests, "slow down").lookupTopicResponse
    assert body.response == pb.CommandLookupTopicResponse.Failed
    assert (body.error, body.message) == (pb.TooManyRequests, "slow down")


def test_producer_success_minimal() -> None:
    body = round_trip(commands.producer_success(7, "standalone-0-3", -1)).producer_success
    assert (body.request_id, body.producer_name, body.last_sequence_id) == (7, "standalone-0-3", -1)
    assert body.HasField("last_sequence_id")
    # as Pulsar: schema_version always set, empty without a schema (the Java client requires it)
    assert body.HasField("schema_version") and body.schema_version == b""
    for absent in ("topic_epoch", "producer_ready"):
        assert not body.HasField(absent)


def test_producer_success_with_options() -> None:
    version = (3).to_bytes(8, "big")
    body = commands.producer_success(
        7, "p", 41, version, topic_epoch=2, producer_ready=False
    ).producer_success
    assert (body.schema_version, body.topic_epoch, body.producer_ready) == (version, 2, False)
    assert body.HasField("producer_ready")


def test_send_receipt() -> None:
    body = round_trip(commands.send_receipt(1, 9, 12, 34)).send_receipt
    assert (body.producer_id, body.sequence_id) == (1, 9)
    assert (body.message_id.ledgerId, body.message_id.entryId) == (12, 34)
    assert not body.message_id.HasField("partition")
    assert not body.HasField("highest_sequence_id")
    assert commands.send_receipt(1, 9, 12, 34, highest_sequence_id=11).send_receipt.highest_sequence_id == 11


def test_send_receipt_for_a_duplicate_carries_minus_one() -> None:
    body = commands.send_receipt(1, 9, -1, -1).send_receipt
    assert (body.message_id.ledgerId, body.message_id.entryId) == (U64_MAX, U64_MAX)


def test_send_error() -> None:
    body = round_trip(commands.send_error(2, 5, pb.ChecksumError, "checksum mismatch")).send_error
    assert (body.producer_id, body.sequence_id, body.error, body.message) == (
        2,
        5,
        pb.ChecksumError,
        "checksum mismatch",
    )


@pytest.mark.parametrize(
    ("build", "field"),
    [(commands.close_producer, "close_producer"), (commands.close_consumer, "close_consumer")],
)
def test_broker_initiated_close_uses_request_id_minus_one(
    build: Callable[[int], pb.BaseCommand], field: str
) -> None:
    body = getattr(round_trip(build(6)), field)
    assert body.request_id == U64_MAX == commands.NO_REQUEST_ID
    assert not body.HasField("assignedBrokerServiceUrl")


def test_message_minimal() -> None:
    body = round_trip(commands.message(3, 1, 0, -1)).message
    assert body.consumer_id == 3
    assert (body.message_id.ledgerId, body.message_id.entryId) == (1, 0)
    assert body.message_id.HasField("partition") and body.message_id.partition == -1
    assert not body.message_id.HasField("batch_index")
    assert not body.HasField("redelivery_count")
    assert list(body.ack_set) == []
    assert not body.HasField("consumer_epoch")


def test_message_with_redelivery_count_ack_set_and_epoch() -> None:
    body = round_trip(
        commands.message(3, 1, 0, 2, redelivery_count=4, ack_set=[-2, 5], consumer_epoch=1)
    ).message
    assert body.redelivery_count == 4
    assert list(body.ack_set) == [-2, 5]
    assert body.message_id.partition == 2
    assert body.consumer_epoch == 1


def test_message_ids_are_written_as_uint64() -> None:
    body = commands.message(0, -1, -1, -1).message
    assert (body.message_id.ledgerId, body.message_id.entryId) == (U64_MAX, U64_MAX)
    latest = (1 << 63) - 1
    body = commands.message(0, latest, latest, 0).message
    assert (body.message_id.ledgerId, body.message_id.entryId) == (latest, latest)


def test_active_consumer_change() -> None:
    body = round_trip(commands.active_consumer_change(8, False)).active_consumer_change
    assert body.consumer_id == 8
    assert body.HasField("is_active") and body.is_active is False


def test_ack_response_success_and_failure() -> None:
    ok = commands.ack_response(1, 2).ackResponse
    assert (ok.consumer_id, ok.request_id) == (1, 2)
    assert not ok.HasField("error") and not ok.HasField("message")
    failed = round_trip(commands.ack_response(1, 2, pb.TransactionConflict, "conflict")).ackResponse
    assert (failed.error, failed.message) == (pb.TransactionConflict, "conflict")


def test_get_last_message_id_response() -> None:
    body = round_trip(
        commands.get_last_message_id_response(9, 3, 4, 1, 2, mark_delete=(3, 1))
    ).getLastMessageIdResponse
    last = body.last_message_id
    assert (last.ledgerId, last.entryId, last.partition, last.batch_index) == (3, 4, 1, 2)
    mark = body.consumer_mark_delete_position
    assert (mark.ledgerId, mark.entryId) == (3, 1)
    assert not mark.HasField("partition")


def test_get_last_message_id_response_for_an_empty_topic() -> None:
    body = commands.get_last_message_id_response(9, -1, -1, -1, -1).getLastMessageIdResponse
    assert (body.last_message_id.ledgerId, body.last_message_id.entryId) == (U64_MAX, U64_MAX)
    assert not body.HasField("consumer_mark_delete_position")


def test_consumer_stats_response() -> None:
    body = commands.consumer_stats_response(
        4, consumerName="c1", type="Shared", availablePermits=-3, msgBacklog=12, msgRateOut=1.5
    ).consumerStatsResponse
    assert (body.consumerName, body.type, body.msgBacklog, body.msgRateOut) == ("c1", "Shared", 12, 1.5)
    assert body.availablePermits == 0
    assert not body.HasField("error_code")
    error = commands.consumer_stats_error(4, pb.ConsumerNotFound, "no consumer 4").consumerStatsResponse
    assert (error.error_code, error.error_message) == (pb.ConsumerNotFound, "no consumer 4")


def test_topics_of_namespace_response() -> None:
    topics = ["persistent://public/default/a", "persistent://public/default/b-partition-0"]
    body = round_trip(commands.topics_of_namespace_response(2, topics)).getTopicsOfNamespaceResponse
    assert list(body.topics) == topics
    assert not body.HasField("topics_hash") and not body.HasField("filtered")
    hashed = commands.topics_of_namespace_response(2, [], topics_hash="1a2b3c4d", filtered=True)
    assert hashed.getTopicsOfNamespaceResponse.topics_hash == "1a2b3c4d"
    assert hashed.getTopicsOfNamespaceResponse.filtered is True


def test_success_with_and_without_schema() -> None:
    assert not commands.success(1).success.HasField("schema")
    assert round_trip(commands.success(1, STRING_SCHEMA)).success.schema == STRING_SCHEMA


def test_get_schema_response_and_error() -> None:
    version = (0).to_bytes(8, "big")
    body = round_trip(commands.get_schema_response(5, STRING_SCHEMA, version)).getSchemaResponse
    assert (body.schema, body.schema_version) == (STRING_SCHEMA, version)
    assert not body.HasField("error_code")
    error = commands.get_schema_error(5, pb.TopicNotFound, "no schema").getSchemaResponse
    assert (error.error_code, error.error_message) == (pb.TopicNotFound, "no schema")
    assert not error.HasField("schema")


class Code(IntEnum):
    ConsumerBusy = 5


def test_error_codes_may_be_plain_or_enum_ints() -> None:
    assert commands.error(1, 5, "busy").error.error == pb.ConsumerBusy
    assert commands.error(1, Code.ConsumerBusy, "busy").error.error == pb.ConsumerBusy
    assert commands.send_error(1, 2, Code.ConsumerBusy, "busy").send_error.error == pb.ConsumerBusy


def test_unknown_error_code_is_refused() -> None:
    with pytest.raises(ValueError):
        commands.error(1, 99, "what")
    with pytest.raises(ValueError):
        commands.ack_response(1, 2, 26, "what")


def test_get_or_create_schema_response() -> None:
    body = commands.get_or_create_schema_response(3, b"\x00" * 8).getOrCreateSchemaResponse
    assert (body.request_id, body.schema_version) == (3, b"\x00" * 8)
    assert not body.HasField("error_code")
    error = commands.get_or_create_schema_error(3, pb.IncompatibleSchema, "bad").getOrCreateSchemaResponse
    assert (error.error_code, error.error_message) == (pb.IncompatibleSchema, "bad")


def test_message_id_data_and_uint64() -> None:
    assert commands.to_uint64(-1) == U64_MAX
    assert commands.to_uint64(5) == 5
    data = commands.message_id_data(-1, 2, batch_index=0)
    assert (data.ledgerId, data.entryId, data.batch_index) == (U64_MAX, 2, 0)
    assert not data.HasField("partition")


# ---------------------------------------------------------------------------
# The schema itself
# ---------------------------------------------------------------------------

BASE_FIELDS = T.DESCRIPTOR.fields_by_number


def test_every_command_type_has_its_sub_message_at_the_same_number() -> None:
    types = T.Type.values()
    assert set(types) == set(range(2, 41)) | set(range(50, 69))
    for command_type in types:
        field = BASE_FIELDS[command_type]
        assert field.type == FieldDescriptor.TYPE_MESSAGE, field.name


@pytest.mark.parametrize(
    ("number", "name"),
    [
        (20, "redeliverUnacknowledgedMessages"),
        (21, "partitionMetadata"),
        (23, "lookupTopic"),
        (31, "active_consumer_change"),
        (38, "ackResponse"),
        (62, "tcClientConnectRequest"),
        (64, "watchTopicList"),
        (68, "topicMigrated"),
    ],
)
def test_base_command_wire_names(number: int, name: str) -> None:
    assert BASE_FIELDS[number].name == name


@pytest.mark.parametrize(
    ("message", "number", "name", "required"),
    [
        (pb.MessageIdData, 1, "ledgerId", True),
        (pb.MessageIdData, 2, "entryId", True),
        (pb.CommandSubscribe, 17, "keySharedMeta", False),
        (pb.CommandSubscribe, 13, "initialPosition", False),
        (pb.CommandFlow, 2, "messagePermits", True),
        (pb.CommandError, 3, "message", True),
        (pb.CommandSendError, 4, "message", True),
        (pb.CommandConnected, 1, "server_version", True),
        (pb.CommandProducerSuccess, 2, "producer_name", True),
        (pb.CommandGetLastMessageIdResponse, 1, "last_message_id", True),
        (pb.Schema, 3, "schema_data", True),
        (pb.KeySharedMeta, 3, "hashRanges", False),
        (pb.MessageMetadata, 11, "num_messages_in_batch", False),
        (pb.SingleMessageMetadata, 3, "payload_size", True),
        (pb.CommandConsumerStats, 4, "consumer_id", True),
        (pb.CommandConsumerStatsResponse, 16, "messageAckRate", False),
        # Additions from newer Pulsar versions.
        (pb.CommandConnect, 11, "proxy_version", False),
        (pb.CommandPartitionedTopicMetadata, 6, "metadata_auto_creation_enabled", False),
        (pb.CommandLookupTopic, 8, "properties", False),
        (pb.CommandUnsubscribe, 3, "force", False),
        (pb.CommandGetTopicsOfNamespace, 6, "properties", False),
        (pb.CommandGetOrCreateSchema, 4, "producerName", False),
        (pb.CommandTcClientConnectRequest, 3, "scalable", False),
        (pb.FeatureFlags, 5, "supports_get_partitioned_metadata_without_auto_creation", False),
        (pb.FeatureFlags, 9, "supports_tc_metadata_discovery", False),
        (pb.MessageMetadata, 32, "schema_id", False),
    ],
)
def test_field_names_numbers_and_labels(
    message: type[Message], number: int, name: str, required: bool
) -> None:
    field = message.DESCRIPTOR.fields_by_number[number]
    assert field.name == name
    assert field.is_required == required


def test_defaults_that_clients_rely_on() -> None:
    assert pb.MessageIdData().partition == -1
    assert pb.MessageIdData().batch_index == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.CommandSubscribe().durable is True
    assert pb.CommandSubscribe().force_topic_creation is True
    assert pb.CommandProducer().user_provided_producer_name is True
    assert pb.CommandPartitionedTopicMetadata().metadata_auto_creation_enabled is True
    assert pb.CommandGetTopicsOfNamespaceResponse().changed is True
    assert pb.MessageMetadata().num_messages_in_batch == 1


def test_enum_values() -> None:
    assert [pb.CompressionType.Value(n) for n in ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")] == [0, 1, 2, 3, 4]
    assert pb.ProducerFenced == 25 and pb.ConsumerAssignError == 19
    assert pb.ProtocolVersion.Value("v20") == 20 and pb.ProtocolVersion.Value("v21") == 21
    assert pb.Schema.Type.Value("None") == 0 and pb.Schema.Type.Value("External") == 22
    assert pb.CommandSubscribe.Key_Shared == 3
    assert pb.CommandAck.ChecksumMismatch == 2
    assert pb.STICKY == 1 and pb.ExclusiveWithFencing == 3


def test_generated_module_name() -> None:
    assert pb.BaseCommand.__module__ == "magnetar.wire.pulsar_api_pb2"
    assert pb.DESCRIPTOR.package == "pulsar.proto"
