"""Bad input over a raw socket: each offender gets a clear error, nobody else is harmed.

After every abuse a second, well-behaved official client produces and consumes, and a
raw connection opened before the abuse still answers PING.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from e2e_helpers import new_topic, round_trip

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, pb, ping
from magnetar.wire.frames import FRAME_PADDING, crc32c, encode_payload_command, make_entry

MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_LIMIT = MAX_MESSAGE_SIZE + FRAME_PADDING


@pytest.fixture
def bystander(broker: BrokerProcess) -> Iterator[RawConnection]:
    """A connection that minds its own business during the abuse; it must survive."""
    conn = RawConnection.to_service(broker.service_url)
    conn.handshake()
    yield conn
    conn.send_command(ping())
    conn.expect(T.PONG)
    assert not conn.closed_by_peer
    conn.close()
    round_trip(broker.service_url)


def connected(broker: BrokerProcess) -> RawConnection:
    conn = RawConnection.to_service(broker.service_url)
    conn.handshake()
    return conn


def fatal_error(conn: RawConnection) -> pb.CommandError:
    """The ERROR a broker sends before it closes a connection it cannot trust any more."""
    frame = conn.expect(T.ERROR)
    assert conn.wait_closed(5), "the broker should close the connection after the error"
    error = frame.command.error
    assert error.message
    return error


def test_garbage_bytes(broker: BrokerProcess, bystander: RawConnection) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.send_bytes(b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        error = fatal_error(conn)
    assert "exceeds the limit" in error.message


def test_undecodable_command(broker: BrokerProcess, bystander: RawConnection) -> None:
    with connected(broker) as conn:
        body = b"\xff\xff\xff\xff\xff"
        conn.send_bytes(struct.pack(">II", 4 + len(body), len(body)) + body)
        error = fatal_error(conn)
    assert "cannot decode" in error.message


def test_frame_over_the_size_limit(broker: BrokerProcess, bystander: RawConnection) -> None:
    with connected(broker) as conn:
        conn.create_producer(new_topic())
        # Only the length is sent: the broker must refuse it before buffering the body.
        conn.send_bytes(struct.pack(">I", FRAME_LIMIT - 4 + 1))
        error = fatal_error(conn)
    assert "exceeds the limit" in error.message and str(FRAME_LIMIT) in error.message


def test_frame_at_the_size_limit_is_accepted(broker: BrokerProcess, bystander: RawConnection) -> None:
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        overhead = len(conn.send_message(0, 0, b"", producer_name="p")) + 64
        conn.expect(T.SEND_RECEIPT)
        conn.send_message(0, 1, b"x" * (MAX_MESSAGE_SIZE - overhead), producer_name="p")
        receipt = conn.expect(T.SEND_RECEIPT).command.send_receipt
    assert receipt.sequence_id == 1


def test_wrong_checksum_fails_only_that_message(broker: BrokerProcess, bystander: RawConnection) -> None:
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        conn.send_message(0, 0, b"corrupted", corrupt_checksum=True)
        error = conn.expect(T.SEND_ERROR).command.send_error
        assert (error.producer_id, error.sequence_id) == (0, 0)
        assert error.error == pb.ChecksumError and error.message
        conn.send_message(0, 1, b"intact")
        receipt = conn.expect(T.SEND_RECEIPT).command.send_receipt
        assert receipt.sequence_id == 1
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=pb.CommandSubscribe.Earliest)
        conn.send_command(pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=10)))
        message = conn.expect(T.MESSAGE)
        assert message.entry.endswith(b"intact")
        assert not [f for f in conn.frames_for(0.3) if f.command.type == T.MESSAGE]


def test_a_bad_send_among_pipelined_ones_fails_alone(broker: BrokerProcess, bystander: RawConnection) -> None:
    """Sends that arrive in one read are published as a run; the one with a wrong checksum
    is refused on its own, and the others are stored and receipted in their order."""
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        with conn.corked():
            for seq in range(8):
                conn.send_message(0, seq, f"m{seq}".encode(), corrupt_checksum=seq == 3)
        answers = [conn.next_frame(5) for _ in range(8)]
        errors = [f.command.send_error for f in answers if f is not None and f.command.type == T.SEND_ERROR]
        receipts = [f.command.send_receipt for f in answers if f is not None and f.command.type == T.SEND_RECEIPT]
        assert [(e.sequence_id, e.error) for e in errors] == [(3, pb.ChecksumError)]
        assert [r.sequence_id for r in receipts] == [0, 1, 2, 4, 5, 6, 7]
        entry_ids = [r.message_id.entryId for r in receipts]
        assert entry_ids == list(range(entry_ids[0], entry_ids[0] + 7))
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=pb.CommandSubscribe.Earliest)
        conn.send_command(pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=10)))
        payloads = [conn.expect(T.MESSAGE).entry[-2:] for _ in range(7)]
        assert payloads == [b"m0", b"m1", b"m2", b"m4", b"m5", b"m6", b"m7"]


def test_send_for_an_unknown_producer(broker: BrokerProcess, bystander: RawConnection) -> None:
    with connected(broker) as conn:
        conn.send_message(42, 7, b"who am I")
        error = conn.expect(T.SEND_ERROR).command.send_error
        assert (error.producer_id, error.sequence_id) == (42, 7)
        assert error.error == pb.NotAllowedError and "42" in error.message
        conn.send_command(ping())
        conn.expect(T.PONG)


@pytest.mark.parametrize("entry", [
    b"",
    b"\x0e\x01",
    b"\x00\x00\x00\x05abc",
    b"\x00\x00\x00\x03\xff\xff\xff payload",
], ids=["empty", "magic only", "metadata overruns", "undecodable metadata"])
def test_send_with_a_malformed_entry(broker: BrokerProcess, bystander: RawConnection, entry: bytes) -> None:
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        conn.send_payload(pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0)), entry)
        error = conn.expect(T.SEND_ERROR).command.send_error
        assert error.error != pb.UnknownError and error.message
        assert "internal error" not in error.message
        # The connection and the topic both still work.
        conn.send_message(0, 1, b"fine")
        assert conn.expect(T.SEND_RECEIPT).command.send_receipt.sequence_id == 1
    round_trip(broker.service_url)
    with connected(broker) as reader:
        reader.subscribe(topic, "s", initialPosition=pb.CommandSubscribe.Earliest)
        reader.send_command(pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=10)))
        assert reader.expect(T.MESSAGE).entry.endswith(b"fine")


def test_valid_checksum_over_metadata_without_required_fields(
        broker: BrokerProcess, bystander: RawConnection) -> None:
    topic = new_topic()
    body = struct.pack(">I", 2) + b"\x10\x01" + b"payload"  # MessageMetadata{sequence_id 1} only
    entry = struct.pack(">HI", 0x0E01, crc32c(body)) + body
    with connected(broker) as conn:
        conn.create_producer(topic)
        conn.send_payload(pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0)), entry)
        error = conn.expect(T.SEND_ERROR).command.send_error
    assert "producer_name" in error.message


def test_unknown_command_type(broker: BrokerProcess, bystander: RawConnection) -> None:
    with connected(broker) as conn:
        body = b"\x08\x7f"  # type 127: no such command
        conn.send_bytes(struct.pack(">II", 4 + len(body), len(body)) + body)
        error = fatal_error(conn)
    assert "type" in error.message


@pytest.mark.parametrize("command", [
    pb.BaseCommand(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=77)),
    pb.BaseCommand(type=T.TC_CLIENT_CONNECT_REQUEST,
                   tcClientConnectRequest=pb.CommandTcClientConnectRequest(request_id=77, tc_id=0)),
    pb.BaseCommand(type=T.WATCH_TOPIC_LIST, watchTopicList=pb.CommandWatchTopicList(
        request_id=77, watcher_id=1, namespace="public/default", topics_pattern=".*")),
], ids=["NEW_TXN", "TC_CLIENT_CONNECT_REQUEST", "WATCH_TOPIC_LIST"])
def test_unsupported_command_gets_not_allowed(broker: BrokerProcess, bystander: RawConnection,
                                              command: pb.BaseCommand) -> None:
    with connected(broker) as conn:
        conn.send_command(command)
        error = conn.expect_reply(77, T.ERROR).command.error
        assert error.error == pb.NotAllowedError and "not supported" in error.message
        conn.send_command(ping())
        conn.expect(T.PONG)


@pytest.mark.parametrize("command", [
    pb.BaseCommand(type=T.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(producer_id=0, sequence_id=0)),
    pb.BaseCommand(type=T.CONNECTED, connected=pb.CommandConnected(server_version="me")),
    pb.BaseCommand(type=T.ACTIVE_CONSUMER_CHANGE,
                   active_consumer_change=pb.CommandActiveConsumerChange(consumer_id=0)),
], ids=["SEND_RECEIPT", "CONNECTED", "ACTIVE_CONSUMER_CHANGE"])
def test_broker_bound_copy_of_a_client_bound_command_is_answered(
        broker: BrokerProcess, bystander: RawConnection, command: pb.BaseCommand) -> None:
    with connected(broker) as conn:
        conn.send_command(command)
        error = conn.expect(T.ERROR).command.error
        assert error.error == pb.NotAllowedError and error.message
        conn.send_command(ping())
        conn.expect(T.PONG)


def test_second_connect_is_refused(broker: BrokerProcess, bystander: RawConnection) -> None:
    with connected(broker) as conn:
        conn.send_command(pb.BaseCommand(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="again", protocol_version=20)))
        error = conn.expect(T.ERROR).command.error
        assert error.error == pb.NotAllowedError and "CONNECT" in error.message


def test_command_before_connect(broker: BrokerProcess, bystander: RawConnection) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.send_command(pb.BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=new_topic(), producer_id=0, request_id=1)))
        error = fatal_error(conn)
    assert "CONNECT" in error.message


def test_frames_before_a_bad_one_are_still_served(broker: BrokerProcess, bystander: RawConnection) -> None:
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        send = encode_payload_command(pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0)),
                                      make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0,
                                                                    publish_time=1), b"ok"))
        conn.send_bytes(send + struct.pack(">I", FRAME_LIMIT))  # one write: a good SEND, then a bad frame
        fatal_error(conn)
    with connected(broker) as consumer:
        consumer.subscribe(topic, "s", initialPosition=pb.CommandSubscribe.Earliest)
        consumer.send_command(pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=5)))
        assert consumer.expect(T.MESSAGE).entry.endswith(b"ok")


def test_many_abusive_connections_leave_the_broker_healthy(broker: BrokerProcess) -> None:
    for _ in range(20):
        with RawConnection.to_service(broker.service_url) as conn:
            conn.send_bytes(b"\x00\x00\x00\x04\x00\x00\x00\x09")
            fatal_error(conn)
    round_trip(broker.service_url)


@pytest.mark.parametrize("cumulative", [True, False], ids=["cumulative", "individual"])
def test_ack_beyond_the_last_message_is_refused(broker: BrokerProcess, bystander: RawConnection,
                                                cumulative: bool) -> None:
    topic = new_topic()
    with connected(broker) as conn:
        conn.create_producer(topic)
        conn.send_message(0, 0, b"m0")
        stored = conn.expect(T.SEND_RECEIPT).command.send_receipt.message_id
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, initialPosition=pb.CommandSubscribe.Earliest)
        conn.send_command(pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=10)))
        conn.expect(T.MESSAGE)
        future = pb.MessageIdData(ledgerId=stored.ledgerId + 1000, entryId=5)
        conn.send_command(pb.BaseCommand(type=T.ACK, ack=pb.CommandAck(
            consumer_id=0, message_id=[future], request_id=3,
            ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual)))
        response = conn.expect(T.ACK_RESPONSE).command.ackResponse
        assert response.error == pb.NotAllowedError and "Cannot acknowledge" in response.message
        # Nothing was swallowed: the next message is delivered.
        conn.send_message(0, 1, b"m1")
        assert conn.expect(T.MESSAGE).entry.endswith(b"m1")
