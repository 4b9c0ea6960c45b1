"""Settings whose effect a user relies on, shown by their effect: batch-index acks turned
off, auto subscription creation off (the dead-letter producer's initial subscription too),
the delayed-delivery policy's tick, and replication and offload refused rather than stored."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pulsar
import pytest
from e2e_helpers import ack_part_of_a_batch, drain, new_topic, quiet_logger

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T

SHARED = pulsar.ConsumerType.Shared


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {"acknowledgmentAtBatchIndexLevelEnabled": "false", "allowAutoSubscriptionCreation": "false",
              "delayedDeliveryTickTimeMillis": "100"}
    proc = BrokerProcess(tmp_path_factory.mktemp("effects") / "data", config).start()
    yield proc
    proc.kill()


def create_subscription(admin: httpx.Client, topic: str, name: str) -> None:
    """Subscriptions are not made on first subscribe on this broker: the admin makes them."""
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    assert admin.put(f"{path}").status_code in (204, 409)
    response = admin.put(f"{path}/subscription/{name}", json={"ledgerId": -1, "entryId": -1})
    assert response.status_code == 204, response.text


def test_batch_index_acks_are_ignored_when_turned_off(client: pulsar.Client, admin: httpx.Client) -> None:
    """acknowledgmentAtBatchIndexLevelEnabled=false: acks of some messages of a batch do not
    count, so the whole batch comes again (with the setting on, only the unacked four do;
    tests/e2e/test_subscriptions.py)."""
    topic = new_topic("batch-acks")
    create_subscription(admin, topic, "s")
    consumer = client.subscribe(topic, "s", consumer_type=SHARED, batch_index_ack_enabled=True)
    ack_part_of_a_batch(client, topic, consumer, 10, 6)
    again = client.subscribe(topic, "s", consumer_type=SHARED, batch_index_ack_enabled=True)
    assert sorted(m.data() for m in drain(again, 500)) == sorted(f"b{i}".encode() for i in range(10))
    stats = admin.get(topic.replace("persistent://", "/admin/v2/persistent/") + "/stats").json()
    assert stats["subscriptions"]["s"]["msgBacklog"] >= 1


def test_subscribe_without_the_subscription_is_refused(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=2, logger=quiet_logger())
    try:
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(new_topic("no-auto-sub"), "missing")
    finally:
        client.close()


def test_an_initial_subscription_is_not_created_when_auto_creation_is_off(
        broker: BrokerProcess, client: pulsar.Client, admin: httpx.Client) -> None:
    """A producer asking for an initial subscription (the dead-letter producer does) is
    refused, as Pulsar refuses it, rather than creating what the broker forbids."""
    topic = new_topic("dlq")
    client.create_producer(topic).close()  # the topic exists; its subscriptions do not
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(_producer(topic, "dlq-sub"))
        error = conn.expect_reply(1, T.ERROR).command.error
        assert error.error == pulsar_error("NotAllowedError")
        assert "auto subscription creation is not allowed" in error.message
    stats = admin.get(topic.replace("persistent://", "/admin/v2/persistent/") + "/stats").json()
    assert "dlq-sub" not in stats["subscriptions"]
    create_subscription(admin, topic, "dlq-sub")
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(_producer(topic, "dlq-sub"))
        conn.expect_reply(1, T.PRODUCER_SUCCESS)


def _producer(topic: str, initial_subscription: str):  # type: ignore[no-untyped-def]
    from magnetar.testing.raw_client import producer
    return producer(topic, 0, 1, initial_subscription_name=initial_subscription)


def pulsar_error(name: str) -> int:
    from magnetar.wire import pulsar_api_pb2 as pb
    return int(pb.ServerError.Value(name))


def test_the_delayed_delivery_policy_tick_decides_how_early_a_message_may_go(
        client: pulsar.Client, admin: httpx.Client) -> None:
    """Non-strict delivery lets a message go up to one tick early: with the namespace
    policy's tickTime at 10 s, a message delayed 3 s comes at once; back at 100 ms it waits."""
    assert admin.put("/admin/v2/namespaces/public/ticks").status_code == 204
    policy = "/admin/v2/namespaces/public/ticks/delayedDelivery"
    assert admin.post(policy, json={"active": True, "tickTime": 10_000}).status_code == 204
    topic = new_topic("tick").replace("public/default", "public/ticks")
    create_subscription(admin, topic, "s")
    consumer = client.subscribe(topic, "s", consumer_type=SHARED)
    producer = client.create_producer(topic)
    sent = time.monotonic()
    producer.send(b"early", deliver_after=timedelta(seconds=3))
    assert consumer.receive(timeout_millis=2500).data() == b"early"
    assert time.monotonic() - sent < 2.5
    assert admin.post(policy, json={"active": True, "tickTime": 100}).status_code == 204
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the change reaches the loaded topic: then a 3 s delay holds
        sent = time.monotonic()
        producer.send(b"probe", deliver_after=timedelta(seconds=3))
        try:
            early = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            assert consumer.receive(timeout_millis=5000).data() == b"probe"
            assert time.monotonic() - sent >= 2.5
            return
        consumer.acknowledge(early)
    pytest.fail("the delayed-delivery policy's new tickTime never applied")


@pytest.mark.parametrize(("body", "status", "reason"), [
    (["standalone", "nowhere"], 403, "Invalid cluster id: nowhere"),
    (["global"], 412, "Cannot specify global"),
])
def test_replication_to_other_clusters_is_refused(admin: httpx.Client, body: list[str], status: int,
                                                  reason: str) -> None:
    response = admin.post("/admin/v2/namespaces/public/default/replication", json=body)
    assert response.status_code == status
    assert reason in response.json()["reason"]


def test_replication_to_a_known_other_cluster_is_refused_not_stored(admin: httpx.Client) -> None:
    assert admin.put("/admin/v2/clusters/far-away", json={"serviceUrl": "http://far:8080"}).status_code == 204
    response = admin.post("/admin/v2/namespaces/public/default/replication", json=["standalone", "far-away"])
    assert response.status_code == 412
    assert "Geo-replication is not supported" in response.json()["reason"]
    assert admin.get("/admin/v2/namespaces/public/default/replication").json() == ["standalone"]
    assert admin.post("/admin/v2/namespaces/public/default/replication", json=["standalone"]).status_code == 204
    created = admin.put("/admin/v2/namespaces/public/replicated", json={"replication_clusters": ["far-away"]})
    assert created.status_code == 412
    assert admin.get("/admin/v2/namespaces/public/replicated").status_code == 404


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", 1024),
    ("POST", "/admin/v2/namespaces/public/default/offloadPolicies", {"managedLedgerOffloadDriver": "S3"}),
    ("PUT", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 1000),
    ("PUT", "/admin/v2/persistent/public/default/some-topic/offload", {"ledgerId": 1, "entryId": 1}),
])
def test_offload_is_refused_with_a_reason(admin: httpx.Client, method: str, path: str, body: object) -> None:
    response = admin.request(method, path, json=body)
    assert response.status_code == 412
    assert "offload is not supported" in response.json()["reason"]
    assert admin.get("/admin/v2/namespaces/public/default/offloadThreshold").json() == -1
    created = admin.put("/admin/v2/namespaces/public/offloaded", json={"offload_threshold": 10})
    assert created.status_code == 412
