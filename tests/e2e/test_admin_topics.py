"""Admin REST: topics, partitions, subscriptions, messages and lookup over HTTP."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pulsar
import pytest
from e2e_helpers import EARLIEST, quiet_logger, receive_n, wait_until

from magnetar.testing.broker_process import BrokerProcess


@pytest.fixture
def name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def url(name: str, suffix: str = "", domain: str = "persistent") -> str:
    return f"/admin/v2/{domain}/public/default/{name}{suffix}"


def full(name: str, domain: str = "persistent") -> str:
    return f"{domain}://public/default/{name}"


def reason(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"reason"}, body
    return str(body["reason"])


# -- topics ---------------------------------------------------------------------------------------
def test_create_list_delete_topic(admin: httpx.Client, name: str) -> None:
    assert admin.put(url(name)).status_code == 204
    assert full(name) in admin.get("/admin/v2/persistent/public/default").json()
    r = admin.put(url(name))
    assert r.status_code == 409 and reason(r) == "This topic already exists"
    assert admin.get(url(name, "/partitions")).json() == {"partitions": 0, "deleted": False}
    assert admin.delete(url(name)).status_code == 204
    assert full(name) not in admin.get("/admin/v2/persistent/public/default").json()
    r = admin.delete(url(name))
    assert r.status_code == 404 and reason(r) == "Topic not found"
    assert admin.get(url(name, "/stats")).status_code == 404


def test_non_persistent_topics(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    assert admin.put(url(name, domain="non-persistent")).status_code == 204
    assert full(name, "non-persistent") in admin.get("/admin/v2/non-persistent/public/default").json()
    assert full(name, "non-persistent") not in admin.get("/admin/v2/persistent/public/default").json()
    consumer = client.subscribe(full(name, "non-persistent"), "s")
    producer = client.create_producer(full(name, "non-persistent"))
    producer.send(b"hello")
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    stats = admin.get(url(name, "/stats", "non-persistent")).json()
    assert stats["msgInCounter"] == 1 and "msgDropRate" in stats
    assert admin.post(url(name, "/subscription/s/skip_all", "non-persistent")).status_code == 405
    assert admin.delete(url(name, domain="non-persistent"), params={"force": "true"}).status_code == 204


def test_partitioned_topic_lifecycle(admin: httpx.Client, name: str) -> None:
    r = admin.put(url(name, "/partitions"), json=0)
    assert r.status_code == 406 and "more than 0" in reason(r)
    assert admin.put(url(name, "/partitions"), json="3").status_code == 400
    assert admin.put(url(name, "/partitions"), json=100000).status_code == 406
    assert admin.put(url(name, "/partitions"), json=3).status_code == 204
    assert admin.put(url(name, "/partitions"), json=3).status_code == 409
    assert admin.put(url(name)).status_code == 409
    assert admin.get(url(name, "/partitions")).json()["partitions"] == 3
    assert full(name) in admin.get("/admin/v2/persistent/public/default/partitioned").json()
    topics = admin.get("/admin/v2/persistent/public/default").json()
    assert [t for t in topics if name in t] == [f"{full(name)}-partition-{i}" for i in range(3)]
    assert admin.post(url(name, "/partitions"), json=2).status_code == 422
    assert admin.post(url(name, "/partitions"), json=4).status_code == 204
    assert admin.get(url(name, "/partitions")).json()["partitions"] == 4
    r = admin.delete(url(name))
    assert r.status_code == 409 and "partitioned" in reason(r)
    assert admin.get(url(name, "/stats")).status_code == 404
    stats = admin.get(url(name, "/partitioned-stats")).json()
    assert stats["metadata"] == {"partitions": 4} and len(stats["partitions"]) == 4
    assert admin.get(url(name, "/partitioned-stats"), params={"perPartition": "false"}).json()["partitions"] == {}
    internal = admin.get(url(name, "/partitioned-internalStats")).json()
    assert internal["metadata"] == {"partitions": 4} and len(internal["partitions"]) == 4
    assert admin.delete(url(name, "/partitions")).status_code == 204
    assert admin.get(url(name, "/partitions")).json()["partitions"] == 0
    assert admin.delete(url(name, "/partitions")).status_code == 404
    assert admin.post(url(name, "/partitions"), json=5).status_code == 404
    assert admin.get(url(name, "/partitioned-stats")).status_code == 404


def test_partitioned_stats_aggregate(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    admin.put(url(name, "/partitions"), json=3)
    producer = client.create_producer(full(name), batching_enabled=False, producer_name="p1")
    consumer = client.subscribe(full(name), "agg", consumer_name="c1", initial_position=EARLIEST)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    for msg in receive_n(consumer, 30):
        consumer.acknowledge(msg)
    stats = wait_until(lambda: (s := admin.get(url(name, "/partitioned-stats")).json())
                       ["subscriptions"]["agg"]["msgBacklog"] == 0 and s, what="acks applied")
    assert stats["msgInCounter"] == 30
    assert stats["msgOutCounter"] == 30
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 30
    assert [p["producerName"] for p in stats["publishers"]] == ["p1"]
    consumers = stats["subscriptions"]["agg"]["consumers"]
    assert [c["consumerName"] for c in consumers] == ["c1"] and consumers[0]["msgOutCounter"] == 30
    assert admin.get(url(name, "/subscriptions")).json() == ["agg"]
    r = admin.delete(url(name, "/partitions"))
    assert r.status_code == 412 and "active" in reason(r)
    assert admin.delete(url(name, "/partitions"), params={"force": "true"}).status_code == 204


def test_partitioned_subscription_operations(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    admin.put(url(name, "/partitions"), json=2)
    assert admin.put(url(name, "/subscription/all")).status_code == 204
    assert admin.put(url(name, "/subscription/all")).status_code == 409
    producer = client.create_producer(full(name), batching_enabled=False)
    for i in range(10):
        producer.send(b"x", partition_key=str(i))
    stats = admin.get(url(name, "/partitioned-stats")).json()
    assert stats["subscriptions"]["all"]["msgBacklog"] == 10
    assert admin.post(url(name, "/subscription/all/skip_all")).status_code == 204
    assert admin.get(url(name, "/partitioned-stats")).json()["subscriptions"]["all"]["msgBacklog"] == 0
    assert admin.post(url(name, "/subscription/all/resetcursor/0")).status_code == 204
    assert admin.get(url(name, "/partitioned-stats")).json()["subscriptions"]["all"]["msgBacklog"] == 10
    assert admin.post(url(name, "/subscription/all/skip/1")).status_code == 405
    assert admin.get(url(name, "/subscription/all/position/1")).status_code == 405
    assert admin.delete(url(name, "/subscription/all")).status_code == 204
    assert admin.get(url(name, "/subscriptions")).json() == []


def test_delete_refused_with_clients_unless_forced(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(full(name))
    producer.send(b"x")
    r = admin.delete(url(name))
    assert r.status_code == 412 and reason(r) == "Topic has active producers/subscriptions"
    assert admin.delete(url(name), params={"force": "true"}).status_code == 204
    assert full(name) not in admin.get("/admin/v2/persistent/public/default").json()
    assert admin.get(url(name, "/internalStats")).status_code == 404


def test_unload_and_clients_reconnect(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    consumer = client.subscribe(full(name), "s", initial_position=EARLIEST)
    producer = client.create_producer(full(name), batching_enabled=False)
    producer.send(b"before")
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    wait_until(lambda: admin.get(url(name, "/stats")).json()["subscriptions"]["s"]["msgBacklog"] == 0,
               what="ack applied")
    assert admin.put(url(name, "/unload")).status_code == 204
    producer.send(b"after")
    msg = consumer.receive(timeout_millis=10000)
    assert msg.data() == b"after"
    consumer.acknowledge(msg)
    stats = wait_until(lambda: (s := admin.get(url(name, "/stats")).json())["subscriptions"]["s"]["consumers"]
                       and s["subscriptions"]["s"]["msgBacklog"] == 0 and s, what="consumer back")
    assert len(stats["publishers"]) == 1
    assert admin.put(url("never-created", "/unload")).status_code == 404


# -- subscriptions -----------------------------------------------------------------------------------
def test_subscription_create_at_positions(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(full(name), batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    assert admin.put(url(name, "/subscription/latest")).status_code == 204
    earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    assert admin.put(url(name, "/subscription/earliest"), json=earliest).status_code == 204
    third = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
    assert admin.put(url(name, "/subscription/third"), json=third).status_code == 204
    r = admin.put(url(name, "/subscription/third"))
    assert r.status_code == 409 and reason(r) == "Subscription already exists for topic"
    assert admin.put(url(name, "/subscription/bad"), json={"ledgerId": "one"}).status_code == 400
    subs = admin.get(url(name, "/stats")).json()["subscriptions"]
    assert {k: v["msgBacklog"] for k, v in subs.items()} == {"latest": 0, "earliest": 5, "third": 3}
    assert admin.get(url(name, "/subscriptions")).json() == ["earliest", "latest", "third"]
    consumer = client.subscribe(full(name), "third")
    assert consumer.receive(timeout_millis=5000).data() == b"m2"
    r = admin.delete(url(name, "/subscription/third"))
    assert r.status_code == 412 and reason(r) == "Subscription has active connected consumers"
    assert admin.delete(url(name, "/subscription/third"), params={"force": "true"}).status_code == 204
    assert admin.delete(url(name, "/subscription/third")).status_code == 404
    assert admin.delete(url(name, "/subscription/latest")).status_code == 204
    assert admin.get(url(name, "/subscriptions")).json() == ["earliest"]


def test_skip_reset_and_expire(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(full(name), batching_enabled=False)
    admin.put(url(name, "/subscription/s"), json={"ledgerId": -1, "entryId": -1})
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]

    def backlog() -> int:
        return int(admin.get(url(name, "/stats")).json()["subscriptions"]["s"]["msgBacklog"])

    assert backlog() == 10
    assert admin.post(url(name, "/subscription/s/skip/3")).status_code == 204
    assert backlog() == 7
    internal = admin.get(url(name, "/internalStats")).json()
    assert internal["cursors"]["s"]["markDeletePosition"] == f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    assert admin.post(url(name, "/subscription/s/skip_all")).status_code == 204
    assert backlog() == 0
    assert admin.post(url(name, "/subscription/s/resetcursor/0")).status_code == 204
    assert backlog() == 10
    target = {"ledgerId": ids[6].ledger_id(), "entryId": ids[6].entry_id()}
    assert admin.post(url(name, "/subscription/s/resetcursor"), json=target).status_code == 204
    assert backlog() == 4
    assert admin.post(url(name, "/subscription/s/resetcursor"), json={**target, "isExcluded": True}).status_code == 204
    assert backlog() == 3
    assert admin.post(url(name, "/subscription/s/resetcursor"), json={"entryId": 1}).status_code == 400
    assert admin.post(url(name, "/subscription/s/resetcursor"), json={"ledgerId": 2**62, "entryId": 0}
                      ).status_code == 204
    assert backlog() == 0
    admin.post(url(name, "/subscription/s/resetcursor/0"))
    assert admin.post(url(name, "/subscription/s/expireMessages/3600")).status_code == 204
    assert backlog() == 10
    time.sleep(0.01)
    assert admin.post(url(name, "/subscription/s/expireMessages/0")).status_code == 204
    sub = admin.get(url(name, "/stats")).json()["subscriptions"]["s"]
    assert sub["msgBacklog"] == 0 and sub["totalMsgExpired"] == 10 and sub["lastExpireTimestamp"] > 0
    admin.post(url(name, "/subscription/s/resetcursor/0"))
    assert admin.post(url(name, "/all_subscription/expireMessages/0")).status_code == 204
    assert backlog() == 0
    for bad in ("/subscription/s/skip/-1", "/subscription/s/skip/abc", "/subscription/s/expireMessages/x"):
        r = admin.post(url(name, bad))
        assert r.status_code == 404, (bad, r.text)
        reason(r)
    r = admin.post(url(name, "/subscription/nope/skip_all"))
    assert r.status_code == 404 and reason(r) == "Subscription not found"


# -- messages ----------------------------------------------------------------------------------------
def test_peek_examine_and_get_by_id(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(full(name), batching_enabled=False, producer_name="peeker")
    admin.put(url(name, "/subscription/s"), json={"ledgerId": -1, "entryId": -1})
    ids = [producer.send(f"payload-{i}".encode(), properties={"n": str(i), "ü": "ß"}, partition_key=f"key-{i}",
                         event_timestamp=1_700_000_000_000 + i) for i in range(3)]
    r = admin.get(url(name, "/subscription/s/position/1"))
    assert r.status_code == 200
    assert r.content == b"payload-0"
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["X-Pulsar-Message-ID"] == f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    assert json.loads(r.headers["X-Pulsar-PROPERTY"]) == {"n": "0", "ü": "ß"}
    assert r.headers["X-Pulsar-partition-key"] == "key-0"
    assert r.headers["X-Pulsar-producer-name"] == "peeker"
    assert r.headers["X-Pulsar-sequence-id"] == "0"
    assert r.headers["X-Pulsar-event-time"] == "2023-11-14T22:13:20Z"
    assert r.headers["X-Pulsar-publish-time"].endswith("Z")
    assert admin.get(url(name, "/subscription/s/position/3")).content == b"payload-2"
    r = admin.get(url(name, "/subscription/s/position/4"))
    assert r.status_code == 404 and "Message not found" in reason(r)
    assert admin.get(url(name, "/subscription/s/position/0")).status_code == 404
    assert admin.get(url(name, "/subscription/nope/position/1")).status_code == 404
    admin.post(url(name, "/subscription/s/skip/1"))
    assert admin.get(url(name, "/subscription/s/position/1")).content == b"payload-1"
    examine = admin.get(url(name, "/examinemessage"), params={"initialPosition": "earliest", "messagePosition": 1})
    assert examine.content == b"payload-0"
    assert admin.get(url(name, "/examinemessage")).content == b"payload-2"
    assert admin.get(url(name, "/examinemessage"), params={"messagePosition": 2}).content == b"payload-1"
    assert admin.get(url(name, "/examinemessage"), params={"messagePosition": 9}).status_code == 404
    assert admin.get(url(name, "/examinemessage"), params={"initialPosition": "middle"}).status_code == 400
    got = admin.get(url(name, f"/ledger/{ids[1].ledger_id()}/entry/{ids[1].entry_id()}"))
    assert got.content == b"payload-1" and got.headers["X-Pulsar-partition-key"] == "key-1"
    assert admin.get(url(name, f"/ledger/{ids[1].ledger_id()}/entry/9999")).status_code == 404
    assert admin.get(url(name, "/ledger/-5/entry/0")).status_code == 404
    last = admin.get(url(name, "/lastMessageId")).json()
    assert last == {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id(), "partitionIndex": -1}
    found = admin.get(url(name, "/messageid/0")).json()
    assert (found["ledgerId"], found["entryId"]) == (ids[0].ledger_id(), ids[0].entry_id())
    assert admin.get(url(name, f"/messageid/{2**62}")).status_code == 404


def test_peek_batch_and_compressed(admin: httpx.Client, client: pulsar.Client, name: str) -> None:
    producer = client.create_producer(full(name), batching_enabled=True, batching_max_messages=5,
                                      batching_max_publish_delay_ms=50,
                                      compression_type=pulsar.CompressionType.ZLib)
    admin.put(url(name, "/subscription/s"), json={"ledgerId": -1, "entryId": -1})
    for i in range(5):
        producer.send_async(b"z" * 200 + str(i).encode(), None)
    producer.flush()
    r = admin.get(url(name, "/subscription/s/position/1"))
    assert r.status_code == 200
    assert r.headers["X-Pulsar-num-batch-message"] == "5"
    assert r.headers["X-Pulsar-compression"] == "ZLIB"
    assert int(r.headers["X-Pulsar-batch-size"]) == len(r.content) > 1000
    from magnetar.wire import pulsar_api_pb2 as pb
    from magnetar.wire.batch import iter_batch
    metadata = pb.MessageMetadata(num_messages_in_batch=5)
    assert [body[-1:] for _, body in iter_batch(metadata, r.content)] == [b"0", b"1", b"2", b"3", b"4"]


def test_messages_on_empty_topic(admin: httpx.Client, name: str) -> None:
    admin.put(url(name))
    last = admin.get(url(name, "/lastMessageId")).json()
    assert last["entryId"] == -1
    assert admin.get(url(name, "/examinemessage")).status_code == 404
    assert admin.get(url(name, "/lastMessageId", "non-persistent")).status_code in (404, 405)


# -- lookup and the http:// service URL ----------------------------------------------------------------
def test_lookup(admin: httpx.Client, broker: BrokerProcess, name: str) -> None:
    found = admin.get(f"/lookup/v2/topic/persistent/public/default/{name}").json()
    assert found["brokerUrl"] == broker.service_url and found["httpUrl"] == broker.web_url
    assert admin.get(f"/lookup/v2/topic/bogus/public/default/{name}").status_code == 412
    assert admin.get(f"/lookup/v2/topic/persistent/public/missing/{name}").status_code == 404


def test_official_client_over_http_service_url(broker: BrokerProcess, admin: httpx.Client, name: str) -> None:
    admin.put(url(name, "/partitions"), json=2)
    client = pulsar.Client(broker.web_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        consumer = client.subscribe(full(name), "s", initial_position=EARLIEST)
        producer = client.create_producer(full(name))
        for i in range(4):
            producer.send(f"m{i}".encode(), partition_key=str(i))
        assert sorted(m.data() for m in receive_n(consumer, 4)) == [b"m0", b"m1", b"m2", b"m3"]
        plain = full(f"{name}-plain")
        producer = client.create_producer(plain)
        producer.send(b"x")
    finally:
        client.close()
    assert admin.get(url(f"{name}-plain", "/partitions")).json()["partitions"] == 0


def test_topic_deduplication_policy(admin: httpx.Client, name: str) -> None:
    admin.put(url(name, "/partitions"), json=2)
    path = url(name, "/deduplicationEnabled")
    assert admin.get(path).json() is None
    assert admin.get(path, params={"applied": "true"}).json() is False
    assert admin.post(path, json=True).status_code == 204
    assert admin.get(path).json() is True
    assert admin.post(path, json="yes").status_code == 400
    assert admin.post("/admin/v2/namespaces/public/default/deduplication", json=False).status_code == 204
    try:
        assert admin.get(path, params={"applied": "true"}).json() is True
        assert admin.delete(path).status_code == 204
        assert admin.get(path, params={"applied": "true"}).json() is False
    finally:
        admin.delete("/admin/v2/namespaces/public/default/deduplication")
    assert admin.get(url("missing-topic", "/deduplicationEnabled")).status_code == 404
