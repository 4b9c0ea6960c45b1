"""Backlog quotas with the official client: each of Pulsar's three policies, the
producer errors as the Python client raises them, and the stats and metrics fields.

The broker checks quotas every second here (``backlogQuotaCheckIntervalInSeconds``);
each test has its own namespace, so one test's quota does not reach another's topics.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger, wait_until

from magnetar.testing.broker_process import BrokerProcess

MESSAGE = b"x" * 200
#: the size quota: a few messages of MESSAGE exceed it
LIMIT_BYTES = 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("quota") / "data",
                         config={"backlogQuotaCheckIntervalInSeconds": "1"}).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    yield c
    c.close()


def namespace_with_quota(admin: httpx.Client, quota: dict[str, object], quota_type: str = "destination_storage") -> str:
    namespace = f"public/quota-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    reply = admin.post(f"/admin/v2/namespaces/{namespace}/backlogQuota", json=quota,
                       params={"backlogQuotaType": quota_type})
    assert reply.status_code == 204, reply.text
    return namespace


def stats(admin: httpx.Client, topic: str) -> dict[str, object]:
    reply = admin.get(f"/admin/v2/{topic.replace('://', '/')}/stats")
    assert reply.status_code == 200, reply.text
    result: dict[str, object] = reply.json()
    return result


def fill_backlog(client: pulsar.Client, topic: str, count: int = 5) -> pulsar.Producer:
    """``count`` sends; the default of 5 just exceeds the quota with its last one, so the
    once-a-second check (which may come at any moment) never sees it exceeded mid-fill."""
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=1500)
    for _ in range(count):
        producer.send(MESSAGE)
    return producer


def disconnected(admin: httpx.Client, topic: str) -> bool:
    return not stats(admin, topic)["publishers"]


def test_hold_disconnects_producers_and_held_sends_time_out(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": LIMIT_BYTES, "policy": "producer_request_hold"})
        topic = f"persistent://{namespace}/hold"
        client.subscribe(topic, "slow")
        producer = fill_backlog(client, topic)
        wait_until(lambda: disconnected(admin, topic), what="the quota check disconnecting the producer")
        # the producer is held: it keeps reconnecting and is refused, so its send times out
        with pytest.raises(pulsar.Timeout):
            producer.send(b"held")
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
            client.create_producer(topic)
        # once the backlog is consumed, producers are accepted again
        assert admin.post(f"/admin/v2/persistent/{namespace}/hold/subscription/slow/skip_all").status_code == 204
        client.create_producer(topic).send(b"accepted again")


def test_exception_fails_new_and_existing_producers(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": LIMIT_BYTES, "policy": "producer_exception"})
        topic = f"persistent://{namespace}/exception"
        client.subscribe(topic, "slow")
        producer = fill_backlog(client, topic)
        wait_until(lambda: disconnected(admin, topic), what="the quota check disconnecting the producer")
        started = time.monotonic()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            producer.send(b"refused")
        assert time.monotonic() - started < 1.5, "the exception policy fails sends at once, not by timeout"
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)


def test_eviction_moves_the_slow_subscription_forward(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": LIMIT_BYTES, "policy": "consumer_backlog_eviction"})
        topic = f"persistent://{namespace}/evict"
        fast = client.subscribe(topic, "fast")
        client.subscribe(topic, "slow")
        producer = fill_backlog(client, topic, 20)
        for _ in range(20):
            fast.acknowledge(fast.receive(timeout_millis=5000))

        def evicted() -> bool:
            subs = stats(admin, topic)["subscriptions"]
            assert isinstance(subs, dict)
            return 0 < subs["slow"]["backlogSize"] < LIMIT_BYTES
        # Pulsar's rule: skip on the slowest subscription in proportion to the excess over
        # 90% of the quota, so the newest messages stay and the quota holds again
        wait_until(evicted, what="the slow subscription's backlog evicted below the quota")
        assert stats(admin, topic)["publishers"], "eviction leaves producers connected"
        producer.send(b"still accepted")
        metrics = admin.get("/metrics").text
        line = re.search(r'pulsar_storage_backlog_quota_exceeded_evictions_total\{[^}]*quota_type="size"'
                         rf'[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)', metrics)
        assert line is not None and float(line.group(1)) >= 1


def test_time_quota_eviction_expires_old_messages(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitTime": 1, "policy": "consumer_backlog_eviction"},
                                         quota_type="message_age")
        topic = f"persistent://{namespace}/aged"
        client.subscribe(topic, "slow")
        fill_backlog(client, topic, 5)
        assert stats(admin, topic)["backlogQuotaLimitTime"] == 1

        def expired() -> bool:
            subs = stats(admin, topic)["subscriptions"]
            assert isinstance(subs, dict)
            return subs["slow"]["msgBacklog"] == 0
        wait_until(expired, what="messages older than the time quota expired")


def test_stats_and_metrics_carry_the_quota_fields(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": 10**9, "policy": "producer_request_hold"})
        topic = f"persistent://{namespace}/fields"
        before_ms = int(time.time() * 1000)
        client.subscribe(topic, "reader-a")
        fill_backlog(client, topic, 3)
        found = wait_until(lambda: (s := stats(admin, topic))["oldestBacklogMessageAgeSeconds"] >= 1 and s,  # type: ignore[operator]
                           what="the oldest backlog message to age a second")
        assert found["backlogQuotaLimitSize"] == 10**9
        assert found["backlogQuotaLimitTime"] == -1
        assert found["oldestBacklogMessageSubscriptionName"] == "reader-a"
        assert before_ms - 1000 <= found["topicCreationTimeStamp"] <= found["lastPublishTimeStamp"]  # type: ignore[operator]
        metrics = admin.get("/metrics").text
        expected = {"pulsar_storage_backlog_quota_limit": 1e9, "pulsar_storage_backlog_quota_limit_time": -1}
        for name, value in expected.items():
            line = re.search(rf'^{name}\{{[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)$', metrics, re.M)
            assert line is not None and float(line.group(1)) == value, name
        age = re.search(rf'^pulsar_storage_backlog_age_seconds\{{[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)$',
                        metrics, re.M)
        assert age is not None and float(age.group(1)) >= 1


def test_bad_quota_bodies_are_refused(broker: BrokerProcess) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": 1, "policy": "producer_exception"})
        bad = admin.post(f"/admin/v2/namespaces/{namespace}/backlogQuota", json={"limitSize": 1, "policy": "drop_all"})
        assert bad.status_code in (400, 422)
        assert admin.get(f"/admin/v2/namespaces/{namespace}/backlogQuotaMap").json() == {
            "destination_storage": {"limitSize": 1, "policy": "producer_exception"}}


def test_topic_quota_overrides_the_namespace(broker: BrokerProcess, client: pulsar.Client) -> None:
    with httpx.Client(base_url=broker.web_url, timeout=10) as admin:
        namespace = namespace_with_quota(admin, {"limitSize": 10**9, "policy": "producer_request_hold"})
        topic = f"persistent://{namespace}/own-quota"
        client.subscribe(topic, "slow")
        fill_backlog(client, topic).close()
        reply = admin.post(f"/admin/v2/persistent/{namespace}/own-quota/backlogQuota",
                           json={"limitSize": LIMIT_BYTES, "policy": "producer_exception"})
        assert reply.status_code == 204, reply.text
        assert stats(admin, topic)["backlogQuotaLimitSize"] == LIMIT_BYTES
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        other = f"persistent://{namespace}/namespace-quota"
        client.subscribe(other, "slow")
        fill_backlog(client, other).send(b"the namespace's quota is far away")
