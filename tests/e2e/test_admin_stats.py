"""Topic stats, internal stats and /metrics checked against what the test produced, acked and skipped."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, quiet_logger, receive_n, wait_until

from magnetar.testing.broker_process import BrokerProcess

SEED_CONSUMER_FIELDS = {
    "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver", "messageAckRate",
    "chunkedMessageRate", "consumerName", "availablePermits", "unackedMessages", "avgMessagesPerEntry",
    "blockedConsumerOnUnackedMsgs", "address", "connectedSince", "clientVersion", "lastAckedTimestamp",
    "lastConsumedTimestamp", "lastConsumedFlowTimestamp", "metadata", "lastAckedTime", "lastConsumedTime"}
TOPIC_FIELDS = {
    "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "bytesInCounter", "msgInCounter",
    "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize", "publishers", "subscriptions",
    "averageMsgSize", "waitingPublishers", "replication", "deduplicationStatus", "nonContiguousDeletedMessagesRanges"}
SUBSCRIPTION_FIELDS = {
    "type", "msgBacklog", "msgRateOut", "msgThroughputOut", "unackedMessages", "msgRateRedeliver", "isDurable",
    "consumers", "msgOutCounter", "bytesOutCounter", "backlogSize", "msgBacklogNoDelayed", "msgDelayed",
    "blockedSubscriptionOnUnackedMsgs", "totalMsgExpired", "nonContiguousDeletedMessagesRanges"}


@pytest.fixture
def topic_path() -> tuple[str, str]:
    name = f"stats-{uuid.uuid4().hex[:10]}"
    return f"persistent://public/default/{name}", f"/admin/v2/persistent/public/default/{name}"


def entry_id(msg_id: pulsar.MessageId) -> str:
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


def test_stats_follow_produce_consume_ack(admin: httpx.Client, client: pulsar.Client,
                                          topic_path: tuple[str, str]) -> None:
    topic, path = topic_path
    producer = client.create_producer(topic, batching_enabled=False, producer_name="prod-1",
                                      properties={"app": "test"})
    consumer = client.subscribe(topic, "sub", consumer_name="cons-1", initial_position=EARLIEST,
                                properties={"role": "reader"})
    payloads = [f"message-{i:02d}".encode() for i in range(10)]
    ids = [producer.send(p) for p in payloads]
    got = receive_n(consumer, 10)
    for msg in got[:4]:
        consumer.acknowledge(msg)
    consumer.acknowledge(got[6])
    consumer.acknowledge(got[7])

    def settled() -> dict[str, object] | None:
        stats = admin.get(f"{path}/stats").json()
        return stats if stats["subscriptions"]["sub"]["msgBacklog"] == 4 else None

    stats = wait_until(settled, what="acks applied")
    assert TOPIC_FIELDS <= set(stats)
    assert stats["msgInCounter"] == 10
    assert stats["bytesInCounter"] > sum(len(p) for p in payloads)
    assert stats["msgOutCounter"] == 10
    assert stats["bytesOutCounter"] == stats["bytesInCounter"]
    assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0 and stats["msgRateOut"] > 0
    assert stats["averageMsgSize"] == pytest.approx(stats["msgThroughputIn"] / stats["msgRateIn"])
    assert stats["storageSize"] == stats["bytesInCounter"]
    assert 0 < stats["backlogSize"] <= stats["storageSize"]
    assert stats["nonContiguousDeletedMessagesRanges"] == 1
    [publisher] = stats["publishers"]
    assert publisher["producerName"] == "prod-1" and publisher["metadata"] == {"app": "test"}
    assert publisher["accessMode"] == "Shared" and publisher["msgRateIn"] > 0
    sub = stats["subscriptions"]["sub"]
    assert SUBSCRIPTION_FIELDS <= set(sub)
    assert sub["type"] == "Exclusive" and sub["isDurable"] is True
    assert sub["unackedMessages"] == 4
    assert sub["msgOutCounter"] == 10 and sub["activeConsumerName"] == "cons-1"
    [cons] = sub["consumers"]
    assert SEED_CONSUMER_FIELDS <= set(cons)
    assert cons["consumerName"] == "cons-1" and cons["metadata"] == {"role": "reader"}
    assert cons["unackedMessages"] == 4 and cons["msgOutCounter"] == 10 and cons["avgMessagesPerEntry"] == 1
    assert cons["lastConsumedTimestamp"] > 0 and cons["lastAckedTimestamp"] > 0
    assert cons["clientVersion"] and cons["address"].startswith("/127.0.0.1:")

    internal = admin.get(f"{path}/internalStats").json()
    assert internal["entriesAddedCounter"] == 10
    assert internal["numberOfEntries"] == 10
    assert internal["totalSize"] == stats["storageSize"]
    assert internal["lastConfirmedEntry"] == entry_id(ids[-1])
    assert internal["currentLedgerEntries"] == 10
    assert internal["ledgers"][-1]["ledgerId"] == ids[0].ledger_id()
    assert sum(ledger["entries"] for ledger in internal["ledgers"]) == 10
    cursor = internal["cursors"]["sub"]
    assert cursor["markDeletePosition"] == entry_id(ids[3])
    first, last = ids[6], ids[7]
    assert cursor["individuallyDeletedMessages"] == f"[({first.ledger_id()}:{first.entry_id() - 1}..{entry_id(last)}]]"
    assert cursor["readPosition"] == f"{ids[-1].ledger_id()}:{ids[-1].entry_id() + 1}"
    assert cursor["active"] is True and cursor["totalNonContiguousDeletedMessagesRange"] == 1

    assert admin.post(f"{path}/subscription/sub/skip/2").status_code == 204
    assert admin.get(f"{path}/stats").json()["subscriptions"]["sub"]["msgBacklog"] == 2
    internal = admin.get(f"{path}/internalStats").json()
    assert internal["cursors"]["sub"]["markDeletePosition"] == entry_id(ids[7])
    assert internal["cursors"]["sub"]["individuallyDeletedMessages"] == "[]"

    producer.close()
    consumer.close()
    stats = admin.get(f"{path}/stats").json()
    assert stats["publishers"] == [] and stats["subscriptions"]["sub"]["consumers"] == []
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 2


def test_batched_messages_count_messages_and_entries(admin: httpx.Client, client: pulsar.Client,
                                                     topic_path: tuple[str, str]) -> None:
    topic, path = topic_path
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=100)
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    for i in range(20):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    for msg in receive_n(consumer, 20):
        consumer.acknowledge(msg)
    stats = wait_until(lambda: (s := admin.get(f"{path}/stats").json())["subscriptions"]["sub"]["msgBacklog"] == 0
                       and s, what="acks applied")
    internal = admin.get(f"{path}/internalStats").json()
    assert stats["msgInCounter"] == 20 and stats["msgOutCounter"] == 20
    assert internal["numberOfEntries"] == internal["entriesAddedCounter"] < 20
    consumer_stats = stats["subscriptions"]["sub"]["consumers"][0]
    assert consumer_stats["avgMessagesPerEntry"] == round(20 / internal["numberOfEntries"])


def test_shared_and_key_shared_subscription_stats(admin: httpx.Client, client: pulsar.Client,
                                                  topic_path: tuple[str, str]) -> None:
    topic, path = topic_path
    client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, consumer_name="a")
    client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, consumer_name="b")
    client.subscribe(topic, "keyed", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="k")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(b"x", partition_key=f"key{i}")
    subs = wait_until(lambda: (s := admin.get(f"{path}/stats").json()["subscriptions"])["shared"]
                      ["unackedMessages"] == 6 and s, what="deliveries")
    assert subs["shared"]["type"] == "Shared"
    assert sorted(c["consumerName"] for c in subs["shared"]["consumers"]) == ["a", "b"]
    assert sum(c["unackedMessages"] for c in subs["shared"]["consumers"]) == 6
    assert "activeConsumerName" not in subs["shared"]
    keyed = subs["keyed"]
    assert keyed["type"] == "Key_Shared" and keyed["keySharedMode"] == "AUTO_SPLIT"
    [cons] = keyed["consumers"]
    assert cons["keyHashRangeArrays"] and "drainingHashesCount" in cons


def test_metrics_have_pulsar_names_and_labels(admin: httpx.Client, client: pulsar.Client,
                                              topic_path: tuple[str, str]) -> None:
    topic, _ = topic_path
    consumer = client.subscribe(topic, "msub", initial_position=EARLIEST)
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"0123456789")
    receive_n(consumer, 5)
    text = admin.get("/metrics").text
    labels = f'cluster="standalone",namespace="public/default",topic="{topic}"'
    assert f"pulsar_in_messages_total{{{labels}}} 5.0" in text
    assert f"pulsar_producers_count{{{labels}}} 1.0" in text
    assert f"pulsar_consumers_count{{{labels}}} 1.0" in text
    assert f"pulsar_subscriptions_count{{{labels}}} 1.0" in text
    assert f"pulsar_msg_backlog{{{labels}}} 5.0" in text
    assert re.search(rf"pulsar_storage_size{{{re.escape(labels)}}} [1-9]", text)
    assert re.search(rf"pulsar_storage_write_latency_count{{{re.escape(labels)}}} 5\.0", text)
    assert re.search(r'pulsar_subscription_unacked_messages\{[^}]*subscription="msub"[^}]*\} 5\.0', text)
    assert re.search(r'pulsar_broker_publish_latency\{cluster="standalone",quantile="0\.5"\} \d', text)
    assert re.search(r"pulsar_broker_publish_latency_count\{[^}]*\} [1-9]", text)
    assert "pulsar_storage_ledger_write_latency_le_1{" in text
    assert "process_cpu_seconds_total" in text
    assert 'pulsar_topics_count{cluster="standalone",namespace="public/default"}' in text


@pytest.fixture(scope="module")
def namespace_level_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("ns-metrics") / "data"
    proc = BrokerProcess(data, config={"exposeTopicLevelMetricsInPrometheus": "false"}).start()
    yield proc
    proc.kill()


def test_metrics_without_topic_labels(namespace_level_broker: BrokerProcess) -> None:
    client = pulsar.Client(namespace_level_broker.service_url, logger=quiet_logger())
    try:
        for name in ("a", "b"):
            producer = client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
            for _ in range(3):
                producer.send(b"x")
    finally:
        client.close()
    text = httpx.get(f"{namespace_level_broker.web_url}/metrics").text
    namespace = 'cluster="standalone",namespace="public/default"'
    assert f"pulsar_in_messages_total{{{namespace}}} 6.0" in text
    # latency buckets of both topics summed: six appends, whatever bucket each fell in
    assert f"pulsar_storage_write_latency_count{{{namespace}}} 6.0" in text
    buckets = re.findall(rf"pulsar_storage_write_latency_le_\w+{{{re.escape(namespace)}}} (\S+)", text)
    assert len(buckets) == 10 and sum(float(b) for b in buckets) == 6.0
    assert re.search(rf"pulsar_storage_write_latency_sum{{{re.escape(namespace)}}} [0-9.e-]*[1-9]", text)
    assert 'topic="' not in text
    assert "pulsar_subscription_back_log{" not in text
