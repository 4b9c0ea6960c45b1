"""Subscription types with the official client: Exclusive, Shared, Failover, positions, acks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pulsar
import pytest
from e2e_helpers import EARLIEST, ack_part_of_a_batch, drain, nothing_arrives, receive_n

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, flow, pb

SHARED = pulsar.ConsumerType.Shared
FAILOVER = pulsar.ConsumerType.Failover


def send_all(client: pulsar.Client, topic: str, count: int, prefix: str = "m") -> list[pulsar.MessageId]:
    producer = client.create_producer(topic)
    ids = [producer.send(f"{prefix}{i}".encode()) for i in range(count)]
    producer.close()
    return ids


# -- Exclusive ---------------------------------------------------------------------------
def test_exclusive_refuses_a_second_consumer(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "s")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s")
    send_all(client, topic, 1)
    assert first.receive(timeout_millis=5000).data() == b"m0"


def test_consumer_of_another_type_is_refused_while_consumers_are_attached(
        client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s", consumer_type=SHARED)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)


def test_exclusive_subscription_is_free_again_after_close(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s").close()
    second = client.subscribe(topic, "s")
    send_all(client, topic, 1)
    assert second.receive(timeout_millis=5000).data() == b"m0"


# -- Shared ---------------------------------------------------------------------------
def test_shared_spreads_round_robin(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "s", consumer_type=SHARED, consumer_name="a")
    second = client.subscribe(topic, "s", consumer_type=SHARED, consumer_name="b")
    send_all(client, topic, 10)
    got_first = receive_n(first, 5)
    got_second = receive_n(second, 5)
    assert nothing_arrives(first) and nothing_arrives(second, 50)
    assert sorted(m.data() for m in got_first + got_second) == sorted(f"m{i}".encode() for i in range(10))
    # Strict alternation: each consumer got every other message.
    indexes = sorted(int(m.data()[1:]) for m in got_first)
    assert indexes in ([0, 2, 4, 6, 8], [1, 3, 5, 7, 9])


_CRASHING_CONSUMER = textwrap.dedent("""
    import sys, pulsar
    client = pulsar.Client(sys.argv[1], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(sys.argv[2], "s", consumer_type=pulsar.ConsumerType.Shared,
                                consumer_name="doomed")
    print("ready", flush=True)
    for line in sys.stdin:
        pass
""")


def test_shared_consumer_crash_redelivers_its_unacked_messages_to_the_others(
        broker: BrokerProcess, client: pulsar.Client, topic: str) -> None:
    survivor = client.subscribe(topic, "s", consumer_type=SHARED, consumer_name="survivor")
    doomed = subprocess.Popen([sys.executable, "-c", _CRASHING_CONSUMER, broker.service_url, topic],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == b"ready"
        send_all(client, topic, 20)
        first_half = receive_n(survivor, 10)
        assert nothing_arrives(survivor), "the other consumer should hold half of the messages"
        for m in first_half:
            survivor.acknowledge(m)
    finally:
        doomed.kill()  # SIGKILL: the TCP connection drops, no CLOSE_CONSUMER
        doomed.wait()
    second_half = receive_n(survivor, 10)
    everything = {m.data() for m in first_half + second_half}
    assert everything == {f"m{i}".encode() for i in range(20)}
    assert nothing_arrives(survivor)


def test_shared_consumer_close_hands_its_unacked_messages_over(client: pulsar.Client, topic: str) -> None:
    leaving = client.subscribe(topic, "s", consumer_type=SHARED, receiver_queue_size=5)
    send_all(client, topic, 6)
    held = receive_n(leaving, 2)
    staying = client.subscribe(topic, "s", consumer_type=SHARED)
    leaving.close()
    got = drain(staying)
    assert {m.data() for m in got} == {f"m{i}".encode() for i in range(6)}
    assert {m.data() for m in held} <= {m.data() for m in got}


def test_cumulative_ack_is_refused_on_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=SHARED)
    send_all(client, topic, 1)
    msg = consumer.receive(timeout_millis=5000)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        consumer.acknowledge_cumulative(msg)


# -- Failover -----------------------------------------------------------------------
def test_failover_active_consumer_is_the_first_by_name(client: pulsar.Client, topic: str) -> None:
    later_name = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="b-consumer")
    earlier_name = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="a-consumer")
    send_all(client, topic, 5)
    got = receive_n(earlier_name, 5)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert nothing_arrives(later_name)


def test_failover_switches_over_when_the_active_consumer_closes(client: pulsar.Client, topic: str) -> None:
    active = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="a")
    standby = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="b")
    send_all(client, topic, 10)
    got = receive_n(active, 10)
    for m in got[:4]:
        active.acknowledge(m)
    assert nothing_arrives(standby)
    active.close()
    taken_over = receive_n(standby, 6)
    assert [m.data() for m in taken_over] == [f"m{i}".encode() for i in range(4, 10)]
    assert nothing_arrives(standby)


def test_failover_cumulative_ack_is_allowed(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="only")
    send_all(client, topic, 5)
    got = receive_n(consumer, 5)
    consumer.acknowledge_cumulative(got[2])
    consumer.close()
    again = client.subscribe(topic, "s", consumer_type=FAILOVER, consumer_name="only")
    assert [m.data() for m in receive_n(again, 2)] == [b"m3", b"m4"]


def test_read_compacted_and_replicated_subscription_flags_are_accepted(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", is_read_compacted=True, replicate_subscription_state_enabled=True,
                                properties={"team": "payments"})
    send_all(client, topic, 2)
    assert [m.data() for m in receive_n(consumer, 2)] == [b"m0", b"m1"]


# -- positions, unsubscribe ------------------------------------------------------------
def test_initial_position_latest_skips_earlier_messages(client: pulsar.Client, topic: str) -> None:
    send_all(client, topic, 3, prefix="old")
    latest = client.subscribe(topic, "latest")
    earliest = client.subscribe(topic, "earliest", initial_position=EARLIEST)
    send_all(client, topic, 1, prefix="new")
    assert latest.receive(timeout_millis=5000).data() == b"new0"
    assert [m.data() for m in receive_n(earliest, 4)] == [b"old0", b"old1", b"old2", b"new0"]


def test_existing_subscription_ignores_initial_position(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s").close()
    send_all(client, topic, 2)
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    assert [m.data() for m in receive_n(consumer, 2)] == [b"m0", b"m1"]
    consumer.close()
    # Nothing was acknowledged: both are still there, whatever position is asked for.
    consumer = client.subscribe(topic, "s")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"m0", b"m1"]


def test_unsubscribe_deletes_the_subscription(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    send_all(client, topic, 2)
    for m in receive_n(consumer, 2):
        consumer.acknowledge(m)
    consumer.unsubscribe()
    # A surviving subscription would have nothing left; a new one starts from the earliest.
    again = client.subscribe(topic, "s", initial_position=EARLIEST)
    assert [m.data() for m in receive_n(again, 2)] == [b"m0", b"m1"]


def test_unsubscribe_refused_while_other_consumers_are_attached(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "s", consumer_type=SHARED)
    second = client.subscribe(topic, "s", consumer_type=SHARED)
    with pytest.raises(pulsar.ConsumerBusy):
        first.unsubscribe()
    send_all(client, topic, 2)
    assert len(drain(first) + drain(second)) == 2


# -- acknowledgements and redelivery -------------------------------------------------------
@pytest.mark.parametrize("consumer_type", [SHARED, pulsar.ConsumerType.Exclusive, FAILOVER])
def test_negative_ack_redelivers_with_growing_redelivery_count(
        client: pulsar.Client, topic: str, consumer_type: pulsar.ConsumerType) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=consumer_type, negative_ack_redelivery_delay_ms=100)
    send_all(client, topic, 1)
    counts = []
    for _ in range(4):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"m0"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2, 3]


def test_redeliver_unacknowledged_messages_sends_everything_again(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=SHARED)
    send_all(client, topic, 3)
    first = receive_n(consumer, 3)
    consumer.acknowledge(first[1])
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 2)
    assert sorted(m.data() for m in again) == [b"m0", b"m2"]
    assert all(m.redelivery_count() == 1 for m in again)


def test_dead_letter_policy_moves_the_message_after_max_redeliveries(client: pulsar.Client, topic: str) -> None:
    dlq_topic = f"{topic}-s-DLQ"
    dlq = client.subscribe(dlq_topic, "dlq-reader", initial_position=EARLIEST)
    consumer = client.subscribe(topic, "s", consumer_type=SHARED, negative_ack_redelivery_delay_ms=100,
                                dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2))
    producer = client.create_producer(topic)
    sent = producer.send(b"poison", properties={"origin": "test"})
    producer.send(b"fine")
    deliveries = 0
    while True:
        msg = consumer.receive(timeout_millis=5000)
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            continue
        deliveries += 1
        consumer.negative_acknowledge(msg)
        if msg.redelivery_count() >= 2:
            break
    dead = dlq.receive(timeout_millis=10000)
    assert dead.data() == b"poison"
    assert dead.properties()["origin"] == "test"
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == str(sent)
    assert deliveries == 3
    # Acknowledged after it moved: the poison message never comes back.
    assert nothing_arrives(consumer, 500)


def test_batch_index_acks_survive_a_reconnect(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=SHARED, batch_index_ack_enabled=True,
                                initial_position=EARLIEST)
    ack_part_of_a_batch(client, topic, consumer, 10, 6)
    again = client.subscribe(topic, "s", consumer_type=SHARED, batch_index_ack_enabled=True)
    rest = drain(again, 500)
    assert sorted(m.data() for m in rest) == [b"b6", b"b7", b"b8", b"b9"]


# -- the same rules seen on the wire ----------------------------------------------------------
def _active_flags(conn: RawConnection) -> dict[int, bool]:
    """The last ACTIVE_CONSUMER_CHANGE each consumer id on the connection was told."""
    flags: dict[int, bool] = {}
    for frame in conn.frames_for(0.3):
        if frame.command.type == T.ACTIVE_CONSUMER_CHANGE:
            change = frame.command.active_consumer_change
            flags[change.consumer_id] = change.is_active
    return flags


def test_failover_active_consumer_by_priority_then_name(broker: BrokerProcess, topic: str) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        for consumer_id, (name, priority) in enumerate([("a", 1), ("c", 0), ("b", 0)]):
            conn.subscribe(topic, "s", consumer_id=consumer_id, request_id=consumer_id,
                           subType=pb.CommandSubscribe.Failover, consumer_name=name, priority_level=priority)
        # "a" sorts first by name but has the worse priority level: "b" is active.
        assert _active_flags(conn) == {0: False, 1: False, 2: True}
        conn.send_command(pb.BaseCommand(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
            consumer_id=2, request_id=10)))
        conn.expect_reply(10, T.SUCCESS)
        assert _active_flags(conn) == {0: False, 1: True}


def test_cumulative_ack_on_shared_is_refused_by_the_broker(broker: BrokerProcess, topic: str) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.create_producer(topic)
        conn.send_message(0, 0, b"x")
        conn.expect(T.SEND_RECEIPT)
        conn.subscribe(topic, "s", consumer_id=0, request_id=2, subType=pb.CommandSubscribe.Shared,
                       initialPosition=pb.CommandSubscribe.Earliest)
        conn.send_command(flow(0, 10))
        msg_id = conn.expect(T.MESSAGE).command.message.message_id
        conn.send_command(pb.BaseCommand(type=T.ACK, ack=pb.CommandAck(
            consumer_id=0, ack_type=pb.CommandAck.Cumulative, message_id=[msg_id], request_id=3)))
        response = conn.expect(T.ACK_RESPONSE).command.ackResponse
        assert response.HasField("error") and response.error == pb.NotAllowedError
        assert "Cumulative" in response.message
        # Not acknowledged: a redelivery brings it back.
        conn.send_command(pb.BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                                         redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                                             consumer_id=0)))
        again = conn.expect(T.MESSAGE).command.message
        assert (again.message_id.ledgerId, again.message_id.entryId) == (msg_id.ledgerId, msg_id.entryId)
        assert again.redelivery_count == 1

