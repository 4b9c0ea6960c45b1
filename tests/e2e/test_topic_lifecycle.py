"""A topic's life with the official client: inactive topics and subscriptions deleted after
the configured time, termination, unload and clearing backlogs.

The broker checks for inactive topics every second and deletes those inactive for one;
subscriptions without consumers expire after two seconds. Tests that need their topics
to stay use a namespace whose policies turn both off.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, quiet_logger, wait_until

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, ack, flow

INACTIVE_S = 1
CONFIG = {
    "brokerDeleteInactiveTopicsFrequencySeconds": "1",
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": str(INACTIVE_S),
    "subscriptionExpirationTimeMinutes": "0.03",
    "subscriptionExpiryCheckIntervalInMinutes": "0.01",
}
KEEP = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 60,
        "deleteWhileInactive": False}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("lifecycle") / "data", config=CONFIG).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    yield c
    c.close()


def new_namespace(admin: httpx.Client, **policies: object) -> str:
    namespace = f"public/life-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    for path, value in policies.items():
        reply = admin.post(f"/admin/v2/namespaces/{namespace}/{path}", json=value)
        assert reply.status_code == 204, reply.text
    return namespace


def kept_namespace(admin: httpx.Client) -> str:
    """Topics and subscriptions here live until deleted."""
    return new_namespace(admin, inactiveTopicPolicies=KEEP, subscriptionExpirationTime=0)


def topics(admin: httpx.Client, namespace: str) -> list[str]:
    reply = admin.get(f"/admin/v2/persistent/{namespace}")
    assert reply.status_code == 200
    names: list[str] = reply.json()
    return names


def path(topic: str) -> str:
    return f"/admin/v2/{topic.replace('://', '/')}"


# -- inactive topics --------------------------------------------------------------------------------
def test_inactive_topic_is_deleted_after_the_configured_time(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = new_namespace(admin)
    topic = f"persistent://{namespace}/idle"
    producer = client.create_producer(topic)
    producer.send(b"nobody subscribes")
    producer.close()
    closed = time.monotonic()
    wait_until(lambda: topic not in topics(admin, namespace), timeout_s=15, what="the inactive topic deleted")
    assert time.monotonic() - closed >= INACTIVE_S - 0.1
    assert admin.get(path(topic) + "/stats").status_code == 404


def test_inactive_non_persistent_topic_is_deleted(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = new_namespace(admin)
    topic = f"non-persistent://{namespace}/fleeting"
    client.create_producer(topic).close()

    def listed() -> list[str]:
        names: list[str] = admin.get(f"/admin/v2/non-persistent/{namespace}").json()
        return names
    assert topic in listed()
    wait_until(lambda: topic not in listed(), timeout_s=15, what="the inactive non-persistent topic deleted")


def test_a_subscription_keeps_the_topic_in_no_subscriptions_mode(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = new_namespace(admin, subscriptionExpirationTime=0)
    kept = f"persistent://{namespace}/subscribed"
    control = f"persistent://{namespace}/control"
    client.subscribe(kept, "stays").close()
    client.create_producer(control).close()
    wait_until(lambda: control not in topics(admin, namespace), timeout_s=15, what="the control topic deleted")
    assert kept in topics(admin, namespace)


def test_caught_up_mode_waits_for_the_backlog(admin: httpx.Client, client: pulsar.Client) -> None:
    caught_up = {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds": 1,
                 "deleteWhileInactive": True}
    namespace = new_namespace(admin, inactiveTopicPolicies=caught_up, subscriptionExpirationTime=0)
    assert admin.get(f"/admin/v2/namespaces/{namespace}/inactiveTopicPolicies").json() == caught_up
    topic = f"persistent://{namespace}/backlogged"
    control = f"persistent://{namespace}/control"
    client.subscribe(topic, "behind").close()
    producer = client.create_producer(topic)
    producer.send(b"unread")
    producer.close()
    client.subscribe(control, "caught-up").close()
    wait_until(lambda: control not in topics(admin, namespace), timeout_s=15, what="the caught-up topic deleted")
    assert topic in topics(admin, namespace), "a subscription with a backlog keeps the topic"
    assert admin.post(path(topic) + "/subscription/behind/skip_all").status_code == 204
    wait_until(lambda: topic not in topics(admin, namespace), timeout_s=15, what="the topic deleted once caught up")


def test_partitioned_topic_is_deleted_as_a_whole(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = new_namespace(admin)
    topic = f"persistent://{namespace}/parted"
    assert admin.put(path(topic) + "/partitions", json=2).status_code == 204
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key=str(i))
    producer.close()
    wait_until(lambda: admin.get(path(topic) + "/partitions").json().get("partitions") == 0, timeout_s=15,
               what="the partitioned topic's metadata deleted")
    assert topics(admin, namespace) == []


def test_namespace_policy_can_keep_inactive_topics(admin: httpx.Client, client: pulsar.Client) -> None:
    kept_ns = kept_namespace(admin)
    control_ns = new_namespace(admin)
    kept = f"persistent://{kept_ns}/kept"
    control = f"persistent://{control_ns}/control"
    client.create_producer(kept).close()
    client.create_producer(control).close()
    wait_until(lambda: control not in topics(admin, control_ns), timeout_s=15, what="the control topic deleted")
    assert kept in topics(admin, kept_ns)
    assert admin.delete(f"/admin/v2/namespaces/{kept_ns}/inactiveTopicPolicies").status_code == 204
    assert admin.get(f"/admin/v2/namespaces/{kept_ns}/inactiveTopicPolicies").status_code in (200, 204)
    wait_until(lambda: kept not in topics(admin, kept_ns), timeout_s=15,
               what="the topic deleted once the namespace falls back to the broker's setting")


def test_topic_policy_overrides_the_namespace(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = kept_namespace(admin)
    topic = f"persistent://{namespace}/own-policy"
    client.create_producer(topic).close()
    own = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 1,
           "deleteWhileInactive": True}
    reply = admin.post(path(topic) + "/inactiveTopicPolicies", json=own)
    assert reply.status_code == 204, reply.text
    wait_until(lambda: topic not in topics(admin, namespace), timeout_s=15,
               what="the topic deleted by its own inactive-topic policy")


def test_bad_inactive_topic_policies_are_refused(admin: httpx.Client) -> None:
    namespace = new_namespace(admin)
    for body in ({"inactiveTopicDeleteMode": "delete_always"}, {"maxInactiveDurationSeconds": -1}, "yes"):
        reply = admin.post(f"/admin/v2/namespaces/{namespace}/inactiveTopicPolicies", json=body)
        assert reply.status_code in (400, 422), body
    assert admin.post(f"/admin/v2/namespaces/{namespace}/subscriptionExpirationTime", json=-5).status_code in (400, 422)


# -- subscriptions -------------------------------------------------------------------------------------
def test_subscription_without_consumers_expires(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = new_namespace(admin, inactiveTopicPolicies=KEEP)
    topic = f"persistent://{namespace}/expiring"
    connected = client.subscribe(topic, "connected")
    client.subscribe(topic, "gone").close()

    def subscriptions() -> list[str]:
        names: list[str] = admin.get(path(topic) + "/subscriptions").json()
        return names
    wait_until(lambda: subscriptions() == ["connected"], timeout_s=15,
               what="the subscription without consumers expired")
    connected.close()


# -- terminate, unload, clear backlog ---------------------------------------------------------------------
def test_terminate_refuses_producers_and_consumers_reach_the_end(broker: BrokerProcess, admin: httpx.Client,
                                                                 client: pulsar.Client) -> None:
    topic = f"persistent://{kept_namespace(admin)}/terminated"
    with RawConnection.to_service(broker.service_url) as raw:
        raw.handshake()
        raw.subscribe(topic, "raw", consumer_id=7, request_id=1)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(f"m{i}".encode()) for i in range(3)]
        reply = admin.post(path(topic) + "/terminate")
        assert reply.status_code == 200, reply.text
        last = reply.json()
        assert (last["ledgerId"], last["entryId"]) == (sent[-1].ledger_id(), sent[-1].entry_id())
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"after the end")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        raw.send_command(flow(7, 10))
        messages = [raw.expect(T.MESSAGE) for _ in range(3)]
        assert all(f.command.type != T.REACHED_END_OF_TOPIC for f in raw.frames_for(0.3)), \
            "the end is told only once every message is acknowledged"
        for frame in messages:
            mid = frame.command.message.message_id
            raw.send_command(ack(7, mid.ledgerId, mid.entryId))
        end = raw.expect(T.REACHED_END_OF_TOPIC, timeout_s=5)
        assert end.command.reachedEndOfTopic.consumer_id == 7
    stats = admin.get(path(topic) + "/stats").json()
    assert stats["publishers"] == []


def test_terminate_partitions_and_refusals(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = kept_namespace(admin)
    topic = f"persistent://{namespace}/parted"
    assert admin.put(path(topic) + "/partitions", json=2).status_code == 204
    client.create_producer(topic).send(b"one")
    assert admin.post(path(topic) + "/terminate").status_code == 405
    reply = admin.post(path(topic) + "/terminate/partitions")
    assert reply.status_code == 200, reply.text
    assert sorted(reply.json()) == ["0", "1"]
    assert admin.post(f"/admin/v2/persistent/{namespace}/missing/terminate").status_code == 404
    assert admin.post(f"/admin/v2/non-persistent/{namespace}/np/terminate").status_code == 405


def test_unload_is_transparent_to_clients(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = kept_namespace(admin)
    topic = f"persistent://{namespace}/unloaded"
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert admin.put(path(topic) + "/unload").status_code == 204
    producer.send(b"after topic unload")
    assert admin.put(f"/admin/v2/namespaces/{namespace}/unload").status_code == 204
    producer.send(b"after namespace unload")
    # unacknowledged messages may come again after a reconnect (at least once), never out of order
    first_seen: list[bytes] = []
    while b"after namespace unload" not in first_seen:
        data = consumer.receive(timeout_millis=10000).data()
        if data not in first_seen:
            first_seen.append(data)
    assert first_seen == [b"before", b"after topic unload", b"after namespace unload"]
    assert admin.put("/admin/v2/namespaces/public/no-such-ns/unload").status_code == 404


def test_clear_backlog_of_a_namespace(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = kept_namespace(admin)
    first, second = (f"persistent://{namespace}/t{i}" for i in range(2))
    for topic in (first, second):
        client.subscribe(topic, "a").close()
        client.subscribe(topic, "b").close()
        producer = client.create_producer(topic)
        for _ in range(3):
            producer.send(b"m")
        producer.close()

    def backlog(topic: str, sub: str) -> int:
        return int(admin.get(path(topic) + "/stats").json()["subscriptions"][sub]["msgBacklog"])
    assert admin.post(f"/admin/v2/namespaces/{namespace}/clearBacklog/a").status_code == 204
    assert [backlog(t, s) for t in (first, second) for s in ("a", "b")] == [0, 3, 0, 3]
    assert admin.post(f"/admin/v2/namespaces/{namespace}/clearBacklog").status_code == 204
    assert [backlog(t, s) for t in (first, second) for s in ("a", "b")] == [0, 0, 0, 0]


def test_creation_time_and_termination_survive_a_restart(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = f"persistent://{kept_namespace(admin)}/created"
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    c.subscribe(topic, "s")
    c.create_producer(topic).send(b"m")
    c.close()
    created = admin.get(path(topic) + "/stats").json()["topicCreationTimeStamp"]
    assert created > 0
    last = admin.post(path(topic) + "/terminate").json()
    broker.restart()
    assert admin.get(path(topic) + "/stats").json()["topicCreationTimeStamp"] == created
    assert admin.post(path(topic) + "/terminate").json() == last
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        with pytest.raises(pulsar.TopicTerminated):
            c.create_producer(topic)
    finally:
        c.close()

