"""Pulsar's limits on producers, consumers, subscriptions, topics and connections, each
refused with Pulsar's error, leaving what exists untouched."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger, wait_until

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, connect, producer, subscribe
from magnetar.wire import pulsar_api_pb2 as pb

LIMITS = {
    "maxProducersPerTopic": "2",
    "maxConsumersPerTopic": "4",
    "maxConsumersPerSubscription": "2",
    "maxSubscriptionsPerTopic": "3",
    "maxProducersAndConsumersPerConnection": "8",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("limits") / "data", config=LIMITS).start()
    yield proc
    proc.kill()


@pytest.fixture
def conn(broker: BrokerProcess) -> Iterator[RawConnection]:
    with RawConnection.to_service(broker.service_url) as c:
        c.handshake()
        yield c


def refused(conn: RawConnection, cmd: pb.BaseCommand, request_id: int) -> pb.CommandError:
    conn.send_command(cmd)
    frame = conn.expect_reply(request_id, T.ERROR)
    return frame.command.error


def test_producers_per_topic(conn: RawConnection) -> None:
    topic = new_topic("producers")
    conn.create_producer(topic, producer_id=1, request_id=1)
    conn.create_producer(topic, producer_id=2, request_id=2)
    error = refused(conn, producer(topic, 3, 3), 3)
    assert error.error == pb.ProducerBusy
    assert "reached max producers limit" in error.message
    conn.send_command(pb.BaseCommand(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
        producer_id=1, request_id=4)))
    conn.expect_reply(4, T.SUCCESS)
    conn.create_producer(topic, producer_id=3, request_id=5)


def test_consumers_per_subscription_then_per_topic(conn: RawConnection) -> None:
    topic = new_topic("consumers")
    shared = {"subType": pb.CommandSubscribe.Shared}
    conn.subscribe(topic, "a", consumer_id=1, request_id=1, **shared)
    conn.subscribe(topic, "a", consumer_id=2, request_id=2, **shared)
    error = refused(conn, subscribe(topic, "a", 3, 3, **shared), 3)
    assert (error.error, error.message) == (pb.ConsumerBusy, "Subscription reached max consumers limit")
    conn.subscribe(topic, "b", consumer_id=4, request_id=4, **shared)
    conn.subscribe(topic, "b", consumer_id=5, request_id=5, **shared)
    error = refused(conn, subscribe(topic, "c", 6, 6, **shared), 6)
    assert (error.error, error.message) == (pb.ConsumerBusy, "Topic reached max consumers limit")


def test_subscriptions_per_topic(broker: BrokerProcess) -> None:
    topic = new_topic("subscriptions")
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        for name in ("s1", "s2", "s3"):
            client.subscribe(topic, name).close()
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "s4")
        client.subscribe(topic, "s2").close()  # an existing subscription stays open to its consumers
    finally:
        client.close()
    stats = httpx.get(f"{broker.web_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats").json()
    assert sorted(stats["subscriptions"]) == ["s1", "s2", "s3"]


def test_one_connection_cannot_hold_more_than_its_share(conn: RawConnection) -> None:
    for index in range(8):
        conn.create_producer(new_topic("share"), producer_id=index, request_id=index)
    topic = new_topic("never-created")
    error = refused(conn, producer(topic, 100, 100), 100)
    assert error.error == pb.NotAllowedError and "limit of 8 producers and consumers" in error.message
    error = refused(conn, subscribe(topic, "s", 101, 101), 101)
    assert error.error == pb.NotAllowedError


def test_namespace_topic_limit(broker: BrokerProcess) -> None:
    namespace = f"public/limited-{new_topic()[-8:]}"
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
        assert admin.post(f"/admin/v2/namespaces/{namespace}/maxTopicsPerNamespace", json=3).status_code == 204
        assert admin.put(f"/admin/v2/persistent/{namespace}/p/partitions", json=2).status_code == 204
        assert admin.put(f"/admin/v2/persistent/{namespace}/one").status_code == 204
        r = admin.put(f"/admin/v2/persistent/{namespace}/two")
        assert r.status_code == 412 and "Exceed maximum number of topics" in r.text
        r = admin.put(f"/admin/v2/persistent/{namespace}/q/partitions", json=1)
        assert r.status_code == 412
        with RawConnection.to_service(broker.service_url) as raw:
            raw.handshake()
            error = refused(raw, producer(f"persistent://{namespace}/auto", 1, 1), 1)
            assert error.error == pb.NotAllowedError and "Exceed maximum number of topics" in error.message
            raw.create_producer(f"persistent://{namespace}/one", producer_id=2, request_id=2)
        assert sorted(admin.get(f"/admin/v2/persistent/{namespace}").json()) == [
            f"persistent://{namespace}/one", f"persistent://{namespace}/p-partition-0",
            f"persistent://{namespace}/p-partition-1"]


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {"brokerMaxConnectionsPerIp": "3"}
    proc = BrokerProcess(tmp_path_factory.mktemp("connections") / "data", config=config).start()
    yield proc
    proc.kill()


def admitted(broker: BrokerProcess) -> RawConnection | None:
    conn = RawConnection.to_service(broker.service_url)
    conn.send_command(connect())
    if conn.read_until(lambda f: f.command.type in (T.CONNECTED, T.ERROR)).command.type == T.CONNECTED:
        return conn
    conn.close()
    return None


def test_connections_per_address(small_broker: BrokerProcess) -> None:
    open_ones = [RawConnection.to_service(small_broker.service_url) for _ in range(3)]
    try:
        for c in open_ones:
            c.handshake()
        with RawConnection.to_service(small_broker.service_url) as extra:
            frame = extra.expect(T.ERROR)
            assert "maximum number of connections from one address" in frame.command.error.message
            assert extra.wait_closed(5)
        open_ones.pop().close()
        open_ones.append(wait_until(lambda: admitted(small_broker), what="a closed connection's place given back"))
    finally:
        for c in open_ones:
            c.close()


def test_publish_rate_holds_a_namespace_s_producers_to_it(broker: BrokerProcess) -> None:
    namespace = f"public/rated-{new_topic()[-8:]}"
    rate, count = 500, 1500
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
        url = f"/admin/v2/namespaces/{namespace}/publishRate"
        assert admin.get(url).json() is None
        assert admin.post(url, json={"publishThrottlingRateInMsg": "fast"}).status_code == 400
        assert admin.post(url, json={"publishThrottlingRateInMsg": rate}).status_code == 204
        assert admin.get(url).json() == {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1}
        topic = f"persistent://{namespace}/rated"
        with RawConnection.to_service(broker.service_url, timeout_s=30) as conn:
            conn.handshake()
            conn.create_producer(topic, producer_id=1, request_id=1)
            started = time.monotonic()
            for seq in range(count):
                conn.send_message(1, seq, b"m")
            receipts = [conn.expect(T.SEND_RECEIPT).command.send_receipt.sequence_id for _ in range(count)]
            elapsed = time.monotonic() - started
        assert receipts == list(range(count))
        # a second's worth goes at once, the rest at the rate
        assert elapsed >= (count - rate) / rate * 0.9, f"{count} messages in {elapsed:.2f}s at {rate}/s"
        stats = admin.get(f"/admin/v2/persistent/{namespace}/rated/stats").json()
        assert stats["publishRateLimitedTimes"] > 0
        assert admin.delete(url).status_code == 204
        assert admin.get(url).json() is None


def test_dispatch_rate_holds_a_namespace_s_subscriptions_to_it(broker: BrokerProcess) -> None:
    namespace = f"public/dispatch-{new_topic()[-8:]}"
    rate, count = 200, 600
    topic = f"persistent://{namespace}/paced"
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
        url = f"/admin/v2/namespaces/{namespace}/subscriptionDispatchRate"
        assert admin.post(url, json={"dispatchThrottlingRateInMsg": rate, "ratePeriodInSecond": 0}).status_code == 400
        assert admin.post(url, json={"dispatchThrottlingRateInMsg": rate}).status_code == 204
        assert admin.get(url).json()["dispatchThrottlingRateInMsg"] == rate
        assert admin.get(f"/admin/v2/namespaces/{namespace}/dispatchRate").json() is None
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(count):
                producer.send_async(str(i).encode(), None)
            producer.flush()
            started = time.monotonic()
            consumer = client.subscribe(topic, "paced", initial_position=pulsar.InitialPosition.Earliest,
                                        receiver_queue_size=1000)
            got = [consumer.receive(timeout_millis=20_000).data() for _ in range(count)]
            elapsed = time.monotonic() - started
        finally:
            client.close()
        assert got == [str(i).encode() for i in range(count)]
        assert elapsed >= (count - rate) / rate * 0.9, f"{count} messages in {elapsed:.2f}s at {rate}/s"
        assert admin.delete(url).status_code == 204
