"""Topic-level policies through Pulsar's REST paths: set, read (own and ``applied``),
remove, bad bodies refused with Pulsar's status and reason, the effect on a loaded topic
at once, on every partition of a partitioned topic, and across a restart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, nothing_arrives, quiet_logger, receive_n

from magnetar.testing.broker_process import BrokerProcess

NS = "/admin/v2/namespaces/public/default"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("topic-policies") / "data",
                         config={"maxUnackedMessagesPerConsumer": "1000", "defaultRetentionTimeInMinutes": "7",
                                 "defaultRetentionSizeInMB": "-1"}).start()
    yield proc
    proc.kill()


def path_of(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1]


def created(admin: httpx.Client) -> str:
    topic = new_topic("policy")
    assert admin.put(path_of(topic)).status_code == 204
    return topic


#: (path, body set, what GET answers after, the broker's value with applied=true)
POLICIES: list[tuple[str, Any, Any, Any]] = [
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1},
     {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}, {"retentionTimeInMinutes": 7, "retentionSizeInMB": -1}),
    ("deduplicationEnabled", True, True, False),
    ("maxProducers", 3, 3, 0),
    ("maxConsumers", 4, 4, 0),
    ("maxConsumersPerSubscription", 2, 2, 0),
    ("maxUnackedMessagesOnConsumer", 5, 5, 1000),
    ("maxUnackedMessagesOnSubscription", 6, 6, 200000),
    ("compactionThreshold", 1048576, 1048576, 0),
    ("inactiveTopicPolicies", {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                               "maxInactiveDurationSeconds": 30, "deleteWhileInactive": True},
     {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds": 30,
      "deleteWhileInactive": True},
     {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 60,
      "deleteWhileInactive": True}),
    ("delayedDelivery", {"tickTime": 500, "active": False, "maxDeliveryDelayInMillis": 0},
     {"tickTime": 500, "active": False, "maxDeliveryDelayInMillis": 0},
     {"tickTime": 1000, "active": True, "maxDeliveryDelayInMillis": 0}),
]


@pytest.mark.parametrize(("policy", "body", "shown", "broker_value"), POLICIES, ids=[p[0] for p in POLICIES])
def test_set_get_applied_remove(admin: httpx.Client, policy: str, body: Any, shown: Any, broker_value: Any) -> None:
    url = f"{path_of(created(admin))}/{policy}"
    assert admin.get(url).json() is None
    assert admin.get(url, params={"applied": "true"}).json() == broker_value
    assert admin.post(url, json=body).status_code == 204
    assert admin.get(url).json() == shown
    assert admin.get(url, params={"applied": "true"}).json() == shown
    assert admin.delete(url).status_code == 204
    assert admin.get(url).json() is None


def test_message_ttl_takes_a_query_parameter(admin: httpx.Client) -> None:
    url = f"{path_of(created(admin))}/messageTTL"
    assert admin.get(url).json() is None
    assert admin.get(url, params={"applied": "true"}).json() == 0
    assert admin.post(url, params={"messageTTL": 30}).status_code == 204
    assert admin.get(url).json() == 30
    assert admin.delete(url).status_code == 204
    assert admin.get(url).json() is None


def test_schema_compatibility_strategy_is_put(admin: httpx.Client) -> None:
    url = f"{path_of(created(admin))}/schemaCompatibilityStrategy"
    assert admin.get(url, params={"applied": "true"}).json() == "FULL"
    assert admin.put(url, json="BACKWARD").status_code == 204
    assert admin.get(url).json() == "BACKWARD"
    assert admin.delete(url).status_code == 204
    assert admin.get(url).json() is None


def test_backlog_quota_map(admin: httpx.Client) -> None:
    base = path_of(created(admin))
    assert admin.get(f"{base}/backlogQuotaMap").json() == {}
    applied = admin.get(f"{base}/backlogQuotaMap", params={"applied": "true"}).json()
    assert applied["destination_storage"]["limitSize"] == -1
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert admin.post(f"{base}/backlogQuota", json=quota).status_code == 204
    assert admin.get(f"{base}/backlogQuotaMap").json() == {"destination_storage": quota}
    assert admin.delete(f"{base}/backlogQuota").status_code == 204
    assert admin.get(f"{base}/backlogQuotaMap").json() == {}


def test_applied_walks_topic_then_namespace_then_broker(admin: httpx.Client) -> None:
    url = f"{path_of(created(admin))}/maxProducers"
    try:
        assert admin.post(f"{NS}/maxProducersPerTopic", json=9).status_code == 204
        assert admin.get(url, params={"applied": "true"}).json() == 9
        assert admin.post(url, json=2).status_code == 204
        assert admin.get(url, params={"applied": "true"}).json() == 2
    finally:
        admin.delete(f"{NS}/maxProducersPerTopic")


@pytest.mark.parametrize(("method", "policy", "kwargs", "status", "reason"), [
    ("POST", "maxProducers", {"json": -1}, 412, "maxProducers must be 0 or more"),
    ("POST", "maxConsumers", {"json": -2}, 412, "maxConsumers must be 0 or more"),
    ("POST", "maxUnackedMessagesOnConsumer", {"json": -1}, 412, "maxUnackedNum must be 0 or more"),
    ("POST", "compactionThreshold", {"json": -1}, 412, "compactionThreshold must be 0 or more"),
    ("POST", "messageTTL", {"params": {"messageTTL": -5}}, 412, "Invalid value for message TTL"),
    ("POST", "maxProducers", {"json": "3"}, 400, ""),
    ("POST", "deduplicationEnabled", {"json": "yes"}, 400, ""),
    ("POST", "retention", {"json": {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0}}, 400,
     "Setting a single time or size limit to 0"),
    ("POST", "retention", {"json": {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}}, 400, ""),
    ("POST", "inactiveTopicPolicies", {"json": {"inactiveTopicDeleteMode": "sometimes"}}, 400, ""),
    ("PUT", "schemaCompatibilityStrategy", {"json": "LENIENT"}, 400, ""),
    ("POST", "backlogQuota", {"json": {"limitSize": -7}}, 400, ""),
])
def test_bad_bodies_are_refused_and_change_nothing(admin: httpx.Client, method: str, policy: str,
                                                   kwargs: dict[str, Any], status: int, reason: str) -> None:
    base = path_of(created(admin))
    resp = admin.request(method, f"{base}/{policy}", **kwargs)
    assert resp.status_code == status, resp.text
    assert reason in resp.json()["reason"]
    shown = admin.get(f"{base}/{'backlogQuotaMap' if policy == 'backlogQuota' else policy}").json()
    assert shown in (None, {})


def test_unknown_topic_is_404(admin: httpx.Client) -> None:
    url = f"{path_of(new_topic('absent'))}/maxProducers"
    assert admin.get(url).status_code == 404
    assert admin.post(url, json=1).status_code == 404


def test_topic_limit_overrides_namespace_at_once_on_a_loaded_topic(broker: BrokerProcess,
                                                                   admin: httpx.Client) -> None:
    topic = created(admin)
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        first = client.create_producer(topic)  # the topic is loaded from here on
        assert admin.post(f"{NS}/maxProducersPerTopic", json=5).status_code == 204
        assert admin.post(f"{path_of(topic)}/maxProducers", json=1).status_code == 204
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        assert admin.delete(f"{path_of(topic)}/maxProducers").status_code == 204
        client.create_producer(topic)  # the namespace's 5 applies again
        first.close()
    finally:
        admin.delete(f"{NS}/maxProducersPerTopic")
        client.close()


def test_unacked_limit_of_the_topic_reaches_live_subscriptions(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = created(admin)
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST)
        assert admin.post(f"{path_of(topic)}/maxUnackedMessagesOnConsumer", json=4).status_code == 204
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        held = receive_n(consumer, 4)
        assert nothing_arrives(consumer, 500), "the topic's maxUnackedMessagesOnConsumer must hold"
        for m in held:
            consumer.acknowledge(m)
        assert receive_n(consumer, 4)
    finally:
        client.close()


def test_partitioned_topic_policy_applies_to_every_partition(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = new_topic("parted")
    assert admin.put(f"{path_of(topic)}/partitions", json=2).status_code == 204
    assert admin.post(f"{path_of(topic)}/maxProducers", json=1).status_code == 204
    assert admin.get(f"{path_of(topic)}-partition-1/maxProducers").json() == 1
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        client.create_producer(f"{topic}-partition-0")
        client.create_producer(f"{topic}-partition-1")
        for index in (0, 1):
            with pytest.raises(pulsar.ProducerBusy):
                client.create_producer(f"{topic}-partition-{index}")
    finally:
        client.close()


def test_topic_policy_survives_a_restart(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = created(admin)
    assert admin.post(f"{path_of(topic)}/maxProducers", json=1).status_code == 204
    assert admin.post(f"{path_of(topic)}/retention",
                      json={"retentionTimeInMinutes": 5, "retentionSizeInMB": 10}).status_code == 204
    broker.restart()
    with httpx.Client(base_url=broker.web_url, timeout=10) as fresh:
        assert fresh.get(f"{path_of(topic)}/maxProducers").json() == 1
        assert fresh.get(f"{path_of(topic)}/retention").json() == {"retentionTimeInMinutes": 5,
                                                                   "retentionSizeInMB": 10}
    client = pulsar.Client(broker.service_url, logger=quiet_logger())
    try:
        client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
    finally:
        client.close()


def test_deleting_the_topic_deletes_its_policies(admin: httpx.Client) -> None:
    topic = created(admin)
    assert admin.post(f"{path_of(topic)}/maxProducers", json=1).status_code == 204
    assert admin.delete(path_of(topic)).status_code == 204
    assert admin.put(path_of(topic)).status_code == 204
    assert admin.get(f"{path_of(topic)}/maxProducers").json() is None
