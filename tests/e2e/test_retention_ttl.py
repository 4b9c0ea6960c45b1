"""Retention and message TTL seen from the official client: consumed data stays readable from
the earliest position while within the retention limits and goes beyond them; a topic
without subscriptions follows the same rule; a reader standing in deleted data gets the
next message there is; TTL empties a backlog; a topic policy beats its namespace's.

The broker checks retention every second and expiry every 300 ms (config), ledgers hold
five entries, so each effect shows within a few seconds."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, receive_n, wait_until

from magnetar.testing.broker_process import BrokerProcess

ENTRIES_PER_LEDGER = 5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("retention") / "data", config={
        "retentionCheckIntervalInSeconds": "1", "messageExpiryCheckIntervalInMinutes": "0.005",
        "managedLedgerMaxEntriesPerLedger": str(ENTRIES_PER_LEDGER)}).start()
    yield proc
    proc.kill()


def path_of(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1]


def ledger_count(admin: httpx.Client, topic: str) -> int:
    return len(admin.get(f"{path_of(topic)}/internalStats").json()["ledgers"])


def publish(client: pulsar.Client, topic: str, count: int, size: int = 0) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"m{i}".encode() + b"." * size)
    producer.close()


def consume_all(client: pulsar.Client, topic: str, count: int) -> None:
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    for m in receive_n(consumer, count):
        consumer.acknowledge(m)
    consumer.close()


def read_from_earliest(client: pulsar.Client, topic: str) -> list[str]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=5000).data().decode().rstrip("."))
    reader.close()
    return got


def test_consumed_data_is_kept_within_retention_and_deleted_without(client: pulsar.Client,
                                                                    admin: httpx.Client) -> None:
    kept, dropped = new_topic("kept"), new_topic("dropped")
    for topic in (kept, dropped):
        assert admin.put(path_of(topic)).status_code == 204
    assert admin.post(f"{path_of(kept)}/retention",
                      json={"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}).status_code == 204
    for topic in (kept, dropped):
        publish(client, topic, 12)
        consume_all(client, topic, 12)
    # the broker default (0, 0): consumed ledgers go at the next check, the current one stays
    wait_until(lambda: ledger_count(admin, dropped) == 1, what="consumed ledgers deleted")
    assert read_from_earliest(client, dropped) == ["m10", "m11"]
    assert read_from_earliest(client, kept) == [f"m{i}" for i in range(12)]
    assert ledger_count(admin, kept) == 3


def test_size_retention_keeps_the_newest_ledgers_up_to_the_limit(client: pulsar.Client, admin: httpx.Client) -> None:
    topic = new_topic("sized")
    assert admin.put(path_of(topic)).status_code == 204
    assert admin.post(f"{path_of(topic)}/retention",
                      json={"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}).status_code == 204
    publish(client, topic, 30, size=100_000)  # six ledgers of about 0.5 MB
    consume_all(client, topic, 30)
    wait_until(lambda: ledger_count(admin, topic) < 7, what="ledgers past the size limit deleted")
    stats = admin.get(f"{path_of(topic)}/internalStats").json()
    kept_bytes = sum(ledger["size"] for ledger in stats["ledgers"])
    assert kept_bytes >= 1024 * 1024, "at least the size limit is kept"
    first = read_from_earliest(client, topic)
    assert first[-1] == "m29" and first[0] != "m0"
    assert len(first) == len(set(first)) and first == [f"m{i}" for i in range(30 - len(first), 30)]


def test_without_subscriptions_the_same_rule_and_a_reader_in_deleted_data_goes_on(
        client: pulsar.Client, admin: httpx.Client) -> None:
    topic = new_topic("nosub")
    assert admin.put(path_of(topic)).status_code == 204
    assert admin.post(f"{path_of(topic)}/retention",
                      json={"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}).status_code == 204
    publish(client, topic, 12)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1)
    assert reader.read_next(timeout_millis=5000).data() == b"m0"
    assert ledger_count(admin, topic) == 3
    assert admin.delete(f"{path_of(topic)}/retention").status_code == 204  # back to the default (0, 0)
    wait_until(lambda: ledger_count(admin, topic) == 1, what="ledgers of a topic without subscriptions deleted")
    rest = [reader.read_next(timeout_millis=5000).data() for _ in range(2)]
    if rest[0] == b"m1":  # the one message the client had fetched before the deletion
        rest = rest[1:] + [reader.read_next(timeout_millis=5000).data()]
    assert rest == [b"m10", b"m11"], "the next message there is after the deleted ledgers"
    reader.close()


def subscription_stats(admin: httpx.Client, topic: str) -> dict[str, object]:
    stats: dict[str, object] = admin.get(f"{path_of(topic)}/stats").json()["subscriptions"]["s"]
    return stats


def test_message_ttl_expires_the_backlog_and_counts_it(client: pulsar.Client, admin: httpx.Client) -> None:
    topic = new_topic("ttl")
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST, receiver_queue_size=1)
    consumer.close()  # a backlog nobody reads
    assert admin.post(f"{path_of(topic)}/messageTTL", params={"messageTTL": 1}).status_code == 204
    publish(client, topic, 7)
    assert subscription_stats(admin, topic)["msgBacklog"] == 7
    stats = wait_until(lambda: (s := subscription_stats(admin, topic))["msgBacklog"] == 0 and s,
                       what="backlog expired")
    assert stats["totalMsgExpired"] == 7
    assert isinstance(stats["lastExpireTimestamp"], int) and stats["lastExpireTimestamp"] > 0
    publish(client, topic, 1)
    consumer = client.subscribe(topic, "s")
    assert consumer.receive(timeout_millis=5000).data() == b"m0", "only what came after the expiry"
    consumer.close()


def test_topic_ttl_overrides_the_namespace_ttl(client: pulsar.Client, admin: httpx.Client) -> None:
    namespace = "public/ttl-override"
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    assert admin.post(f"/admin/v2/namespaces/{namespace}/messageTTL", json=1).status_code == 204
    follows = f"persistent://{namespace}/{new_topic('a').rsplit('/', 1)[1]}"
    overrides = f"persistent://{namespace}/{new_topic('b').rsplit('/', 1)[1]}"
    for topic in (follows, overrides):
        client.subscribe(topic, "s", initial_position=EARLIEST).close()
    assert admin.post(f"{path_of(overrides)}/messageTTL", params={"messageTTL": 3600}).status_code == 204
    assert admin.get(f"{path_of(follows)}/messageTTL", params={"applied": "true"}).json() == 1
    assert admin.get(f"{path_of(overrides)}/messageTTL", params={"applied": "true"}).json() == 3600
    for topic in (follows, overrides):
        publish(client, topic, 4)
    wait_until(lambda: subscription_stats(admin, follows)["msgBacklog"] == 0, what="namespace TTL applied")
    assert subscription_stats(admin, overrides)["msgBacklog"] == 4
    assert subscription_stats(admin, overrides)["totalMsgExpired"] == 0
