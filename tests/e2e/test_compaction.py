"""Topic compaction with the official client: trigger and status over REST, readCompacted
readers and TableView, tombstones, batches, the threshold check, refusals, restarts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, new_topic, quiet_logger, wait_until
from test_cli import magnetar, ok

from magnetar.storage.segment_ledger import topic_dir_name
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, pb, subscribe

THRESHOLD_NS = "public/compact-threshold"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("compaction") / "data",
                         config={"brokerServiceCompactionMonitorIntervalInSeconds": "0.2"}).start()
    yield proc
    proc.kill()


def path_of(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1]


def status(admin: httpx.Client, topic: str) -> dict[str, Any]:
    response = admin.get(path_of(topic) + "/compaction")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def compact(admin: httpx.Client, topic: str) -> None:
    response = admin.put(path_of(topic) + "/compaction")
    assert response.status_code == 204, response.text
    wait_until(lambda: status(admin, topic)["status"] in ("SUCCESS", "ERROR"), what="compaction done")
    assert status(admin, topic) == {"status": "SUCCESS", "lastError": ""}


def read_all(client: pulsar.Client, topic: str, compacted: bool = True) -> list[pulsar.Message]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=5000))
    reader.close()
    return got


def keyed(messages: list[pulsar.Message]) -> list[tuple[str, bytes]]:
    return [(m.partition_key(), m.data()) for m in messages]


def test_status_trigger_and_a_compacted_reader_then_live_messages(admin: httpx.Client,
                                                                   client: pulsar.Client) -> None:
    topic = new_topic("compact")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = {}
    for round_ in range(3):
        for k in range(5):
            ids[f"k{k}"] = producer.send(f"v{round_}-{k}".encode(), partition_key=f"k{k}")
    producer.send(b"", partition_key="k4")  # tombstone
    producer.send(b"no key")
    assert status(admin, topic) == {"status": "NOT_RUN", "lastError": ""}
    compact(admin, topic)

    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    view = [reader.read_next(timeout_millis=5000) for _ in range(4)]
    assert keyed(view) == [(f"k{k}", f"v2-{k}".encode()) for k in range(4)]
    assert [str(m.message_id()) for m in view] == [str(ids[f"k{k}"]) for k in range(4)]
    assert not reader.has_message_available()
    live = producer.send(b"v3-0", partition_key="k0")
    msg = reader.read_next(timeout_millis=5000)
    assert (msg.data(), str(msg.message_id())) == (b"v3-0", str(live))
    reader.close()
    assert len(read_all(client, topic, compacted=False)) == 18  # the topic itself keeps everything

    stats = admin.get(path_of(topic) + "/stats").json()
    record = stats["compaction"]
    assert record["lastCompactionRemovedEventCount"] == 13  # 17 read, 4 kept
    assert record["lastCompactionSucceedTimestamp"] > 0 and record["lastCompactionFailedTimestamp"] == 0
    assert "__compaction" in stats["subscriptions"]
    internal = admin.get(path_of(topic) + "/internalStats").json()
    assert internal["compactedLedger"]["entries"] == 4
    assert internal["cursors"]["__compaction"]["properties"]["CompactedTopicLedger"] == \
        internal["compactedLedger"]["ledgerId"]


def test_compacting_again_builds_on_the_previous_view(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("again")
    producer = client.create_producer(topic, batching_enabled=False)
    for k in range(3):
        producer.send(b"old", partition_key=f"k{k}")
    compact(admin, topic)
    producer.send(b"", partition_key="k0")
    producer.send(b"new", partition_key="k1")
    compact(admin, topic)
    assert keyed(read_all(client, topic)) == [("k2", b"old"), ("k1", b"new")]


def test_batched_messages_keep_their_ids_and_only_survivors_reach_the_reader(admin: httpx.Client,
                                                                            client: pulsar.Client) -> None:
    topic = new_topic("batched")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=50)
    sent = {}
    for i in range(40):
        key = f"k{i % 7}"
        producer.send_async(f"v{i}".encode(), lambda *_: None, partition_key=key)
    producer.flush()
    for i in range(40):
        sent[f"k{i % 7}"] = f"v{i}".encode()
    compact(admin, topic)
    view = read_all(client, topic)
    assert sorted(keyed(view)) == sorted(sent.items())
    assert len({str(m.message_id()) for m in view}) == 7


def test_table_view_holds_the_compacted_state(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("table")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
    producer.send(b"", partition_key="k0")
    compact(admin, topic)
    table = client.create_table_view(topic)
    try:
        assert (len(table), table.get("k0"), table.get("k1"), table.get("k2")) == (2, None, b"v28", b"v29")
        stats = admin.get(path_of(topic) + "/stats").json()
        readers = [s for name, s in stats["subscriptions"].items() if name != "__compaction"]
        assert [s["msgOutCounter"] for s in readers] == [2]  # the view, not the 31 messages
        producer.send(b"fresh", partition_key="k0")
        wait_until(lambda: table.get("k0") == b"fresh", what="the live update")
    finally:
        table.close()


@pytest.mark.parametrize("sub_type", [pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared])
def test_read_compacted_is_refused_on_shared_subscriptions(broker: BrokerProcess, client: pulsar.Client,
                                                           sub_type: int) -> None:
    topic = new_topic("shared")
    with pytest.raises(pulsar.InvalidConfiguration):  # the official client refuses it before asking
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(subscribe(topic, "s", 1, 7, subType=sub_type, read_compacted=True))
        error = conn.expect_reply(7, T.ERROR).command.error
        assert (error.error, error.message) == (
            pb.NotAllowedError, "readCompacted only allowed on failover or exclusive subscriptions")
    consumer = client.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover, is_read_compacted=True,
                                initial_position=EARLIEST)
    consumer.close()


def batching_producer(client: pulsar.Client, topic: str) -> pulsar.Producer:
    return client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                  batching_max_publish_delay_ms=60_000)


def test_threshold_compacts_without_being_asked(admin: httpx.Client, client: pulsar.Client) -> None:
    assert admin.put(f"/admin/v2/namespaces/{THRESHOLD_NS}").status_code == 204
    base = f"/admin/v2/namespaces/{THRESHOLD_NS}/compactionThreshold"
    assert admin.post(base, json=-1).status_code in (400, 412, 422)
    assert admin.post(base, json=2000).status_code == 204
    assert admin.get(base).json() == 2000
    topic = f"persistent://{THRESHOLD_NS}/auto-{new_topic()[-10:]}"
    producer = batching_producer(client, topic)
    producer.send_async(b"x" * 100, None, partition_key="a")
    producer.flush()
    assert status(admin, topic)["status"] == "NOT_RUN"  # 100 bytes: below the threshold
    for i in range(30):  # one batch: the threshold is passed at once, not in the middle
        producer.send_async(b"y" * 100, None, partition_key=f"k{i % 2}")
    producer.flush()
    wait_until(lambda: status(admin, topic)["status"] == "SUCCESS", what="threshold compaction")
    assert sorted(keyed(read_all(client, topic))) == [("a", b"x" * 100), ("k0", b"y" * 100), ("k1", b"y" * 100)]


def test_topic_level_threshold_overrides_the_broker_default(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("topic-threshold")
    producer = batching_producer(client, topic)
    assert admin.post(path_of(topic) + "/compactionThreshold", json=500).status_code == 204
    for i in range(10):
        producer.send_async(b"z" * 100, None, partition_key=f"k{i % 3}")
    producer.flush()
    wait_until(lambda: status(admin, topic)["status"] == "SUCCESS", what="threshold compaction")
    assert len(read_all(client, topic)) == 3


def test_cli_compact_and_status(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic("cli")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(b"v", partition_key=f"k{i % 2}")
    assert ok(magnetar(broker, "admin", "topics", "compaction-status", topic)) == \
        f"Compaction has not been run for {topic} since broker startup\n"
    assert ok(magnetar(broker, "admin", "topics", "compact", topic)) == f"Topic compaction requested for {topic}\n"
    assert ok(magnetar(broker, "admin", "topics", "compaction-status", "-w", topic)) == "Compaction was a success\n"
    missing = magnetar(broker, "admin", "topics", "compact", new_topic("missing"))
    assert missing.returncode != 0 and "Topic not found" in missing.stderr


def test_a_partitioned_topic_is_compacted_partition_by_partition(admin: httpx.Client,
                                                                  client: pulsar.Client) -> None:
    topic = new_topic("partitioned")
    assert admin.put(path_of(topic) + "/partitions", json=2).status_code == 204
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"v%d" % i, partition_key=f"k{i % 4}")
    assert admin.put(path_of(topic) + "/compaction").status_code == 204
    for partition in (f"{topic}-partition-0", f"{topic}-partition-1"):
        wait_until(lambda p=partition: status(admin, p)["status"] == "SUCCESS", what=f"{partition} compacted")
    assert sorted(keyed(read_all(client, topic))) == [(f"k{k}", b"v%d" % (16 + k)) for k in range(4)]


def test_unknown_topics_get_404(admin: httpx.Client) -> None:
    missing = path_of(new_topic("missing"))
    assert admin.put(missing + "/compaction").status_code == 404
    assert admin.get(missing + "/compaction").status_code == 404


def test_the_view_survives_a_crash(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = new_topic("restart")
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    producer = c.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
    compact(admin, topic)
    c.close()
    broker.restart()
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        assert keyed(read_all(c, topic)) == [("k0", b"v8"), ("k1", b"v9")]
    finally:
        c.close()


def test_a_broker_killed_while_compacting_keeps_a_whole_view(broker: BrokerProcess, admin: httpx.Client) -> None:
    topic = new_topic("killed")
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    producer = c.create_producer(topic, batching_enabled=True, batching_max_messages=1000, block_if_queue_full=True)
    for i in range(300):
        producer.send_async(b"first", None, partition_key=f"k{i % 100}")
    producer.flush()
    compact(admin, topic)
    for i in range(100_000):
        producer.send_async(b"second-%d" % i, None, partition_key=f"k{i % 100}")
    producer.flush()
    c.close()
    assert admin.put(path_of(topic) + "/compaction").status_code == 204
    wait_until(lambda: list((broker.data_dir / "compacted").rglob("*.tmp")), what="the new view being written")
    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.web_url, timeout=10) as fresh:
        internal = fresh.get(path_of(topic) + "/internalStats").json()  # loads the topic
    views = sorted(p.name for p in (broker.data_dir / "compacted" / topic_dir_name(topic)).iterdir())
    assert views == [f"{internal['compactedLedger']['ledgerId']:020d}.cmp"]  # the other file is gone
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        view = read_all(c, topic)
    finally:
        c.close()
    latest = {f"k{i % 100}": b"second-%d" % i for i in range(99_900, 100_000)}
    # the first view then every live message, or the second view alone: one key per message either way
    assert dict(keyed(view)) == latest
    assert len(view) in (100, 100 + 100_000)
