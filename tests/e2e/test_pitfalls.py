"""Every item of the pitfalls checklist (shared/reference/protocol.md §9), one test each.

Most look at raw frames: a module-wide conversation drives a broad set of commands over a
raw socket and keeps every frame the broker sent, so the frame-level rules (accepted
command types, required fields, simple-frame sizes) are checked against all of them.
"""

from __future__ import annotations

import time

import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, nothing_arrives, receive_n

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import (
    RawConnection,
    RawFrame,
    T,
    ack,
    connect,
    flow,
    is_payload,
    lookup,
    partitioned_metadata,
    pb,
    ping,
    producer,
    subscribe,
)
from magnetar.wire.batch import make_batch
from magnetar.wire.frames import crc32c, encode_command, peek_metadata, split_broker_entry_metadata

#: What the C++ 4.2.0 client accepts once connected (ClientConnection::handleIncomingCommand).
CPP_ACCEPTED = {
    T.CONNECTED, T.MESSAGE, T.SEND_RECEIPT, T.SEND_ERROR, T.SUCCESS, T.PARTITIONED_METADATA_RESPONSE,
    T.CONSUMER_STATS_RESPONSE, T.LOOKUP_RESPONSE, T.PRODUCER_SUCCESS, T.ERROR, T.TOPIC_MIGRATED,
    T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.PING, T.PONG, T.AUTH_CHALLENGE, T.ACTIVE_CONSUMER_CHANGE,
    T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE,
}
EARLIEST_POSITION = pb.CommandSubscribe.Earliest


def open_raw(broker: BrokerProcess) -> RawConnection:
    conn = RawConnection.to_service(broker.service_url)
    conn.handshake()
    return conn


def send_frame(conn: RawConnection, producer_id: int, sequence_id: int, payload: bytes,
               metadata: pb.MessageMetadata | None = None, **fields: object) -> bytes:
    return conn.send_message(producer_id, sequence_id, payload, producer_name=f"raw-{producer_id}",
                             metadata=metadata, **fields)


def batch_metadata(count: int, sequence_id: int) -> tuple[pb.MessageMetadata, bytes]:
    singles = [(pb.SingleMessageMetadata(payload_size=2, sequence_id=sequence_id + i), f"b{i}".encode())
               for i in range(count)]
    meta = pb.MessageMetadata(producer_name="raw-0", sequence_id=sequence_id,
                              publish_time=int(time.time() * 1000), num_messages_in_batch=count)
    return meta, make_batch(singles)


@pytest.fixture(scope="module")
def conversation_frames(broker: BrokerProcess) -> list[RawFrame]:
    """Everything the broker sent during a broad raw conversation, errors included."""
    topic, failover_topic = new_topic("conversation"), new_topic("conversation-fo")
    with open_raw(broker) as conn:
        conn.send_command(partitioned_metadata(topic, 1))
        conn.expect_reply(1, T.PARTITIONED_METADATA_RESPONSE)
        conn.send_command(lookup(topic, 2))
        conn.expect_reply(2, T.LOOKUP_RESPONSE)
        conn.send_command(lookup("persistent://bad tenant/x/y", 3))
        conn.expect_reply(3, T.LOOKUP_RESPONSE)
        conn.send_command(partitioned_metadata("bogus://x", 4))
        conn.expect_reply(4, T.PARTITIONED_METADATA_RESPONSE)
        conn.create_producer(topic, producer_id=0, request_id=5)
        conn.send_command(producer("persistent://public/default/", 1, 6))
        conn.expect_reply(6, T.ERROR)
        send_frame(conn, 0, 0, b"one")
        meta, payload = batch_metadata(3, 1)
        send_frame(conn, 0, 1, payload, metadata=meta, num_messages=3)
        send_frame(conn, 0, 4, b"corrupt", corrupt_checksum=True)
        send_frame(conn, 0, 5, b"last")
        conn.expect(T.SEND_ERROR)
        for _ in range(3):
            conn.expect(T.SEND_RECEIPT)
        conn.subscribe(topic, "s", consumer_id=0, request_id=7, initialPosition=EARLIEST_POSITION)
        conn.send_command(subscribe(topic, "s", 1, 8))
        conn.expect_reply(8, T.ERROR)  # ConsumerBusy
        conn.send_command(flow(0, 100))
        for _ in range(3):
            conn.expect(T.MESSAGE)
        conn.send_command(pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
            consumer_id=0, request_id=9)))
        conn.expect_reply(9, T.GET_LAST_MESSAGE_ID_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
            consumer_id=99, request_id=10)))
        conn.expect_reply(10, T.ERROR)
        conn.send_command(pb.BaseCommand(type=T.ACK, ack=pb.CommandAck(
            consumer_id=0, ack_type=pb.CommandAck.Individual, request_id=11,
            message_id=[pb.MessageIdData(ledgerId=0, entryId=0)])))
        conn.expect(T.ACK_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                                         redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                                             consumer_id=0)))
        conn.expect(T.MESSAGE)
        conn.send_command(pb.BaseCommand(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(
            request_id=12, consumer_id=0)))
        conn.expect(T.CONSUMER_STATS_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(
            request_id=13, consumer_id=77)))
        conn.expect(T.CONSUMER_STATS_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=(
            pb.CommandGetTopicsOfNamespace(request_id=14, namespace="public/default"))))
        conn.expect_reply(14, T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=15, topic=topic)))
        conn.expect(T.GET_SCHEMA_RESPONSE)
        conn.send_command(pb.BaseCommand(type=T.SEEK, seek=pb.CommandSeek(
            consumer_id=0, request_id=16, message_publish_time=0)))
        conn.expect_reply(16, T.SUCCESS)
        conn.subscribe(failover_topic, "fo", consumer_id=2, request_id=17, subType=pb.CommandSubscribe.Failover,
                       consumer_name="x")
        conn.expect(T.ACTIVE_CONSUMER_CHANGE)
        conn.send_command(pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
            consumer_id=2, request_id=18)))
        conn.expect_reply(18, T.GET_LAST_MESSAGE_ID_RESPONSE)  # an empty topic: ids of -1
        conn.send_command(pb.BaseCommand(type=T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(
            consumer_id=2, request_id=19)))
        conn.expect_reply(19, T.SUCCESS)
        conn.send_command(ping())
        conn.expect(T.PONG)
        conn.send_command(pb.BaseCommand(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
            producer_id=0, request_id=20)))
        conn.expect_reply(20, T.SUCCESS)
        conn.send_command(pb.BaseCommand(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=21)))
        conn.expect_reply(21, T.ERROR)
        conn.frames_for(0.2)
        return list(conn.received)


# 1 --------------------------------------------------------------------------------------
def test_pitfall_01_lookup_and_partitioned_metadata_responses_always_set_response(
        broker: BrokerProcess, conversation_frames: list[RawFrame]) -> None:
    metadata = [f.command.partitionMetadataResponse for f in conversation_frames
                if f.command.type == T.PARTITIONED_METADATA_RESPONSE]
    lookups = [f.command.lookupTopicResponse for f in conversation_frames if f.command.type == T.LOOKUP_RESPONSE]
    assert len(metadata) == 2 and len(lookups) == 2
    assert all(m.HasField("response") for m in metadata + lookups)  # type: ignore[operator]
    ok_meta, bad_meta = metadata
    assert ok_meta.response == pb.CommandPartitionedTopicMetadataResponse.Success
    assert bad_meta.response == pb.CommandPartitionedTopicMetadataResponse.Failed and bad_meta.HasField("error")
    ok_lookup, bad_lookup = lookups
    assert ok_lookup.response == pb.CommandLookupTopicResponse.Connect
    assert ok_lookup.brokerServiceUrl == broker.service_url and ok_lookup.authoritative
    assert bad_lookup.response == pb.CommandLookupTopicResponse.Failed and bad_lookup.HasField("error")


# 2 --------------------------------------------------------------------------------------
def test_pitfall_02_plain_topic_reports_zero_partitions(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic()
    message_id = client.create_producer(topic).send(b"x")
    assert message_id.partition() == -1
    with open_raw(broker) as conn:
        conn.send_command(partitioned_metadata(topic, 1))
        reply = conn.expect_reply(1, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    assert reply.HasField("partitions") and reply.partitions == 0


# 3 --------------------------------------------------------------------------------------
def test_pitfall_03_producer_success_names_the_producer(broker: BrokerProcess, client: pulsar.Client) -> None:
    with open_raw(broker) as conn:
        success = conn.create_producer(new_topic(), user_provided_producer_name=False)
    assert success.producer_name
    topic = new_topic()
    consumer = client.subscribe(topic, "s")
    first, second = client.create_producer(topic), client.create_producer(topic)
    first.send(b"1")
    second.send(b"2")
    assert [m.producer_name() for m in receive_n(consumer, 2)] == [first.producer_name(), second.producer_name()]
    assert "" not in (first.producer_name(), second.producer_name())


# 4 --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("client_version", "expected"), [(20, 20), (21, 21), (12, 12), (99, 21)])
def test_pitfall_04_connected_carries_the_negotiated_protocol_version(
        broker: BrokerProcess, client_version: int, expected: int) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.send_command(connect(client_version))
        connected = conn.expect(T.CONNECTED).command.connected
    assert connected.HasField("protocol_version") and connected.protocol_version == expected
    assert connected.server_version and connected.max_message_size == 5 * 1024 * 1024


# 5 --------------------------------------------------------------------------------------
def test_pitfall_05_simple_frames_have_no_bytes_after_the_command(conversation_frames: list[RawFrame]) -> None:
    simple = [f for f in conversation_frames if not is_payload(f)]
    assert len(simple) > 20
    assert all(f.total_size == 4 + f.command_size and f.entry == b"" for f in simple)


# 6 --------------------------------------------------------------------------------------
def test_pitfall_06_only_commands_the_cpp_client_accepts(conversation_frames: list[RawFrame]) -> None:
    sent = {f.command.type for f in conversation_frames}
    assert sent <= CPP_ACCEPTED, {T.Type.Name(t) for t in sent - CPP_ACCEPTED}
    assert len([f for f in conversation_frames if f.command.type == T.CONNECTED]) == 1
    # The conversation covered the interesting replies, errors included.
    assert {T.MESSAGE, T.SEND_RECEIPT, T.SEND_ERROR, T.ERROR, T.ACK_RESPONSE, T.CLOSE_CONSUMER,
            T.ACTIVE_CONSUMER_CHANGE, T.GET_SCHEMA_RESPONSE, T.CONSUMER_STATS_RESPONSE} <= sent


# 7 --------------------------------------------------------------------------------------
def test_pitfall_07_send_receipts_come_in_send_order(broker: BrokerProcess) -> None:
    topic = new_topic()
    count = 300
    with open_raw(broker) as conn:
        conn.create_producer(topic, producer_id=0, request_id=1)
        conn.create_producer(topic, producer_id=1, request_id=2)
        for seq in range(count):  # interleaved, pipelined, never waiting for a receipt
            send_frame(conn, seq % 2, seq, f"m{seq}".encode(), highest_sequence_id=seq)
        receipts = [conn.expect(T.SEND_RECEIPT).command.send_receipt for _ in range(count)]
    for producer_id in (0, 1):
        mine = [r for r in receipts if r.producer_id == producer_id]
        assert [r.sequence_id for r in mine] == list(range(producer_id, count, 2))
        assert [r.highest_sequence_id for r in mine] == [r.sequence_id for r in mine]
        positions = [(r.message_id.ledgerId, r.message_id.entryId) for r in mine]
        assert positions == sorted(positions)


# 8 --------------------------------------------------------------------------------------
def test_pitfall_08_a_healthy_connection_only_sees_checksum_send_errors(
        broker: BrokerProcess, conversation_frames: list[RawFrame]) -> None:
    errors = [f.command.send_error for f in conversation_frames if f.command.type == T.SEND_ERROR]
    assert [e.error for e in errors] == [pb.ChecksumError]
    # After the checksum error the same connection carried on (receipts and messages after it).
    index = next(i for i, f in enumerate(conversation_frames) if f.command.type == T.SEND_ERROR)
    assert any(f.command.type == T.SEND_RECEIPT for f in conversation_frames[index:])


# 9 --------------------------------------------------------------------------------------
def test_pitfall_09_ping_is_answered_while_messages_flow(broker: BrokerProcess) -> None:
    topic = new_topic()
    with open_raw(broker) as consumer, open_raw(broker) as publisher:
        consumer.subscribe(topic, "s", consumer_id=0, request_id=1)
        consumer.send_command(flow(0, 100_000))
        publisher.create_producer(topic)
        for seq in range(2000):
            send_frame(publisher, 0, seq, b"x" * 100)
        consumer.expect(T.MESSAGE)
        consumer.send_command(ping())  # in the middle of a flood of MESSAGE frames
        pong = consumer.expect(T.PONG, timeout_s=2)
        assert pong.total_size == 4 + pong.command_size and not consumer.closed_by_peer


# 10 -------------------------------------------------------------------------------------
def test_pitfall_10_single_messages_are_not_marked_as_batches(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.create_producer(topic)
        send_frame(conn, 0, 0, b"single")
        meta, payload = batch_metadata(2, 1)
        send_frame(conn, 0, 1, payload, metadata=meta, num_messages=2)
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=EARLIEST_POSITION)
        conn.send_command(flow(0, 10))
        single, batch = conn.expect(T.MESSAGE), conn.expect(T.MESSAGE)
    assert not peek_metadata(split_broker_entry_metadata(single.entry)[1]).HasField("num_messages_in_batch")
    assert peek_metadata(split_broker_entry_metadata(batch.entry)[1]).num_messages_in_batch == 2
    consumer = client.subscribe(topic, "official", initial_position=EARLIEST)
    got = receive_n(consumer, 3)
    assert [(m.data(), m.message_id().batch_index()) for m in got] == [(b"single", -1), (b"b0", 0), (b"b1", 1)]


# 11 -------------------------------------------------------------------------------------
def test_pitfall_11_stored_bytes_are_forwarded_unchanged(broker: BrokerProcess) -> None:
    topic = new_topic()
    meta = pb.MessageMetadata(producer_name="raw-0", sequence_id=0, publish_time=int(time.time() * 1000),
                              partition_key="k", properties=[pb.KeyValue(key="a", value="b")],
                              compression=pb.NONE)
    with open_raw(broker) as conn:
        conn.create_producer(topic)
        sent = send_frame(conn, 0, 0, bytes(range(256)) * 40, metadata=meta)
        conn.expect(T.SEND_RECEIPT)
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=EARLIEST_POSITION)
        conn.send_command(flow(0, 10))
        received = conn.expect(T.MESSAGE)
    _, entry = split_broker_entry_metadata(received.entry)
    assert entry == sent
    assert entry[:2] == b"\x0e\x01" and int.from_bytes(entry[2:6], "big") == crc32c(entry[6:])


# 12 -------------------------------------------------------------------------------------
def test_pitfall_12_close_commands_are_answered(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.create_producer(topic, producer_id=0, request_id=1)
        conn.subscribe(topic, "s", consumer_id=0, request_id=2)
        for request_id, command in [
            (3, pb.BaseCommand(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                producer_id=0, request_id=3))),
            (4, pb.BaseCommand(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                consumer_id=0, request_id=4))),
            (5, pb.BaseCommand(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
                producer_id=12345, request_id=5))),
            (6, pb.BaseCommand(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
                consumer_id=12345, request_id=6))),
        ]:
            conn.send_command(command)
            conn.expect_reply(request_id, T.SUCCESS)
    producer_ = client.create_producer(topic)
    consumer = client.subscribe(topic, "s")
    started = time.monotonic()
    producer_.close()
    consumer.close()
    assert time.monotonic() - started < 2


# 13 -------------------------------------------------------------------------------------
def test_pitfall_13_durable_subscription_defaults_to_latest(client: pulsar.Client, topic: str) -> None:
    producer_ = client.create_producer(topic)
    producer_.send(b"before the subscription")
    consumer = client.subscribe(topic, "s")
    assert nothing_arrives(consumer)
    producer_.send(b"after the subscription")
    assert consumer.receive(timeout_millis=5000).data() == b"after the subscription"


# 14 -------------------------------------------------------------------------------------
def test_pitfall_14_permits_are_counted_in_messages(broker: BrokerProcess) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.create_producer(topic)
        for batch_number in range(4):
            meta, payload = batch_metadata(10, batch_number * 10)
            send_frame(conn, 0, batch_number * 10, payload, metadata=meta, num_messages=10)
        for _ in range(4):
            conn.expect(T.SEND_RECEIPT)
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=EARLIEST_POSITION)
        conn.send_command(flow(0, 5))  # fewer permits than one batch holds: one entry goes, permits go negative
        first = [f for f in conn.frames_for(0.5) if f.command.type == T.MESSAGE]
        conn.send_command(flow(0, 20))  # -5 + 20 = 15: one more batch (5 left), then one more (-5)
        second = [f for f in conn.frames_for(0.5) if f.command.type == T.MESSAGE]
        conn.send_command(flow(0, 4))  # -5 + 4 = -1: nothing
        third = [f for f in conn.frames_for(0.3) if f.command.type == T.MESSAGE]
    assert (len(first), len(second), len(third)) == (1, 2, 0)


# 15 -------------------------------------------------------------------------------------
def test_pitfall_15_request_ids_repeat_across_kinds_of_requests(broker: BrokerProcess) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.send_bytes(b"".join(encode_command(cmd) for cmd in [
                partitioned_metadata(topic, 7),
                lookup(topic, 7),
                producer(topic, 0, 7),
                subscribe(topic, "s", 0, 7),
                pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
                    consumer_id=0, request_id=7)),
            ]))
        replies = [conn.expect_reply(7, kind) for kind in (
            T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP_RESPONSE, T.PRODUCER_SUCCESS, T.SUCCESS,
            T.GET_LAST_MESSAGE_ID_RESPONSE)]
    assert len(replies) == 5
    assert not [f for f in conn.received if f.command.type == T.ERROR]


# 16 -------------------------------------------------------------------------------------
def test_pitfall_16_every_required_field_is_set(conversation_frames: list[RawFrame]) -> None:
    incomplete = [(f.type_name, f.command.FindInitializationErrors()) for f in conversation_frames
                  if not f.command.IsInitialized()]
    assert not incomplete
    empty_last = [f.command.getLastMessageIdResponse for f in conversation_frames
                  if f.command.type == T.GET_LAST_MESSAGE_ID_RESPONSE][-1]
    assert empty_last.last_message_id.entryId == (1 << 64) - 1  # -1: an empty topic
    errors = [f.command.error for f in conversation_frames if f.command.type == T.ERROR]
    assert len(errors) >= 4 and all(e.message for e in errors)


# issue 2 adds two more rules to the list ---------------------------------------------------
def test_pitfall_reader_is_redelivered_its_start_entry(broker: BrokerProcess) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.create_producer(topic)
        for seq in range(5):
            send_frame(conn, 0, seq, f"m{seq}".encode())
        receipts = [conn.expect(T.SEND_RECEIPT).command.send_receipt for _ in range(5)]
        start = receipts[2].message_id
        conn.subscribe(topic, "reader-x", consumer_id=0, request_id=2, durable=False,
                       start_message_id=pb.MessageIdData(ledgerId=start.ledgerId, entryId=start.entryId))
        conn.send_command(flow(0, 10))
        first = conn.expect(T.MESSAGE).command.message.message_id
    assert (first.ledgerId, first.entryId) == (start.ledgerId, start.entryId)


def test_pitfall_seek_closes_the_consumers_before_it_succeeds(broker: BrokerProcess) -> None:
    topic = new_topic()
    with open_raw(broker) as conn:
        conn.create_producer(topic)
        for seq in range(3):
            send_frame(conn, 0, seq, f"m{seq}".encode())
        first_id = conn.expect(T.SEND_RECEIPT).command.send_receipt.message_id
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=EARLIEST_POSITION)
        conn.send_command(flow(0, 10))
        for _ in range(3):
            message = conn.expect(T.MESSAGE).command.message
            conn.send_command(ack(0, message.message_id.ledgerId, message.message_id.entryId))
        conn.send_command(pb.BaseCommand(type=T.SEEK, seek=pb.CommandSeek(
            consumer_id=0, request_id=3, message_id=pb.MessageIdData(ledgerId=first_id.ledgerId,
                                                                     entryId=first_id.entryId))))
        close_or_success = conn.read_until(lambda f: f.command.type in (T.CLOSE_CONSUMER, T.SUCCESS))
        assert close_or_success.command.type == T.CLOSE_CONSUMER
        assert close_or_success.command.close_consumer.consumer_id == 0
        conn.expect_reply(3, T.SUCCESS)
        # The client resubscribes; the subscription reads again from the seek target.
        conn.subscribe(topic, "s", consumer_id=0, request_id=4)
        conn.send_command(flow(0, 10))
        again = conn.expect(T.MESSAGE).command.message.message_id
    assert (again.ledgerId, again.entryId) == (first_id.ledgerId, first_id.entryId)

