"""A producer the broker closes while its sends wait for their sync no longer holds its
connection's limit of unanswered sends.

A closed producer's receipts are never sent, so its sends must stop counting when it is
closed; otherwise a connection that had stopped being read at the limit (a client that
kept sending while the broker was paused, then the topic unloaded) stayed unread: its
client's next lookup on that connection waited out the client's operation timeout, and
its pings went unanswered. The broker runs in this process over real files.
"""

from __future__ import annotations

import time
from pathlib import Path

from magnetar.core.policies.backlog_quota import disconnect_producers
from magnetar.server.broker_service import BrokerService
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import encode_payload_command, make_entry

from .test_topic_loading import Client, until, with_broker

T = pb.BaseCommand
TOPIC = "persistent://public/default/closed-with-sends-in-flight"
LIMIT = 4


def send_frame(sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=int(time.time() * 1000))
    cmd = T(type=T.SEND)
    cmd.send.producer_id, cmd.send.sequence_id = 1, sequence_id
    return encode_payload_command(cmd, make_entry(metadata, b"x"))


def test_a_producer_closed_with_sends_in_flight_lets_its_connection_be_read_again(tmp_path: Path) -> None:
    with_broker(tmp_path, closed_with_sends_in_flight, maxPendingPublishRequestsPerConnection=LIMIT)


async def closed_with_sends_in_flight(broker: BrokerService) -> None:
    client = Client(broker, 1)
    client.producer(TOPIC, 1, 1)
    assert (await until(lambda: client.answer(1), "the producer")).HasField("producer_success")
    client.conn.data_received(b"".join(send_frame(i) for i in range(LIMIT)))
    assert client.conn.reading_paused, "the connection is no longer read at its limit of unanswered sends"
    topic = broker.topics[TOPIC]
    assert topic.pending_receipts, "the sends wait for their sync"
    disconnect_producers(topic)  # as the broker does to a topic over its backlog quota
    await until(lambda: not topic.pending_receipts, "the sends' sync")
    assert not any(cmd.type == T.SEND_RECEIPT for cmd in client.transport.commands), "a closed producer's receipt"
    client.send(T(type=T.PING, ping=pb.CommandPing()))
    await until(lambda: any(cmd.type == T.PONG for cmd in client.transport.commands), "the connection read again")
