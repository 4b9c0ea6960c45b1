"""The admin routes the console reads and Pulsar has none for: topics-page, broker-stats
load-report and rate-history, and a subscription's delayedIndex, against a real broker."""

from __future__ import annotations

import time

import httpx
import pulsar
from e2e_helpers import new_topic, wait_until


def rest(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def test_topics_page_folds_partitions_and_pages_searches_and_sorts(admin: httpx.Client,
                                                                   client: pulsar.Client) -> None:
    prefix = new_topic("page").rsplit("/", 1)[1]
    for i in range(7):
        assert admin.put(f"/admin/v2/persistent/public/default/{prefix}-{i}").status_code == 204
    assert admin.put(f"/admin/v2/persistent/public/default/{prefix}-p/partitions", json=2).status_code == 204
    busy = f"persistent://public/default/{prefix}-3"
    client.subscribe(busy, "s").close()
    producer = client.create_producer(busy, batching_enabled=False)
    for _ in range(4):
        producer.send(b"x" * 100)
    producer.close()

    page = admin.get("/admin/v2/topics-page", params={"search": prefix.upper(), "limit": 3, "offset": 3}).json()
    assert page["total"] == 8 and page["offset"] == 3 and page["limit"] == 3
    assert [t["name"].rsplit("-", 1)[1] for t in page["topics"]] == ["3", "4", "5"]
    parted = admin.get("/admin/v2/topics-page", params={"search": f"{prefix}-p"}).json()["topics"]
    assert len(parted) == 1 and parted[0]["partitions"] == 2
    by_backlog = admin.get("/admin/v2/topics-page", params={"search": prefix, "sort": "backlog", "order": "desc"})
    first = by_backlog.json()["topics"][0]
    stats = admin.get(rest(busy) + "/stats").json()
    assert first["name"] == busy and first["backlog"] == 4 == stats["subscriptions"]["s"]["msgBacklog"]
    assert first["storageSize"] == stats["storageSize"] and first["subscriptions"] == 1
    by_name_desc = admin.get("/admin/v2/topics-page", params={"search": prefix, "order": "desc"}).json()["topics"]
    assert by_name_desc[0]["name"].endswith("-p")
    assert admin.get("/admin/v2/topics-page", params={"search": "no-such-topic-anywhere"}).json() == \
        {"total": 0, "offset": 0, "limit": 50, "topics": []}


def test_topics_page_refuses_bad_parameters(admin: httpx.Client) -> None:
    for params in ({"sort": "color"}, {"order": "sideways"}, {"limit": 0}, {"limit": 1001}, {"offset": -1},
                   {"offset": "x"}, {"search": "s" * 1025}):
        answer = admin.get("/admin/v2/topics-page", params=params)
        assert answer.status_code == 400, params
        assert "reason" in answer.json()


def test_load_report_and_rate_history(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("rates")
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "s")
    for _ in range(10):
        producer.send(b"0123456789")

    def sample_with_traffic() -> dict[str, float] | None:
        samples = admin.get("/admin/v2/broker-stats/rate-history").json()["samples"]
        return next((s for s in samples if s["msgRateIn"] > 0), None)
    sample = wait_until(sample_with_traffic, timeout_s=15, what="a sample with the publishes")
    assert sample["msgThroughputIn"] >= sample["msgRateIn"] * 10
    history = admin.get("/admin/v2/broker-stats/rate-history").json()
    assert history["resolutionSeconds"] == 5 and len(history["samples"]) <= 180
    stamps = [s["timestamp"] for s in history["samples"]]
    assert stamps == sorted(stamps) and stamps[-1] <= time.time() * 1000 + 1000
    # the report is the latest sample: one taken once all ten were stored
    report = wait_until(lambda: (r := admin.get("/admin/v2/broker-stats/load-report").json())["msgBacklog"] >= 10
                        and r, timeout_s=15, what="a sample with the backlog")
    assert report["numProducers"] >= 1 and report["numConsumers"] >= 1 and report["numTopics"] >= 1
    assert report["storageSize"] > 0
    assert report["clusterName"] == "standalone" and report["lastUpdate"] >= history["samples"][-1]["timestamp"]
    consumer.close()
    producer.close()


def test_a_standalone_broker_lists_itself_alone(admin: httpx.Client) -> None:
    view = admin.get("/admin/v2/broker-stats/brokers").json()
    assert view["clustered"] is False and view["clusterName"] == "standalone" and len(view["brokers"]) == 1
    me = view["brokers"][0]
    assert me["brokerId"] == admin.get("/admin/v2/brokers/standalone").json()[0] and me["self"]
    owned = admin.get(f"/admin/v2/brokers/standalone/{me['brokerId']}/ownedNamespaces").json()
    assert me["ownedBundles"] == sorted(owned) and me["error"] is None
    assert me["consoleUrl"] == me["webServiceUrl"] + "/console/" and me["loadReport"]["clusterName"] == "standalone"


def test_delayed_index_of_a_subscription(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("later")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    deliver_at = int(time.time() * 1000) + 600_000
    for i in range(5):
        producer.send(b"d", deliver_at=deliver_at + i)
    index = wait_until(lambda: (p := admin.get(rest(topic) + "/subscription/s/delayedIndex").json()
                                ["partitions"][0])["messages"] == 5 and p, what="5 delayed")
    assert index["partitionIndex"] == -1 and index["tracker"] == "in-memory"
    # the in-memory tracker keeps times rounded down to its tick (delayedDeliveryTickTimeMillis)
    assert deliver_at - 1000 <= index["nextDeliveryTime"] <= deliver_at
    assert index["indexMemoryBytes"] > 0 and index["buckets"] == []
    assert admin.get(rest(topic) + "/subscription/none/delayedIndex").status_code == 404
    assert admin.get(rest(new_topic("absent")) + "/subscription/s/delayedIndex").status_code == 404
    parted = new_topic("later-parted")
    assert admin.put(rest(parted) + "/partitions", json=2).status_code == 204
    client.subscribe(parted, "s").close()
    answer = admin.get(rest(parted) + "/subscription/s/delayedIndex").json()
    assert [p["partitionIndex"] for p in answer["partitions"]] == [0, 1]
    assert all(p["tracker"] is None and p["messages"] == 0 for p in answer["partitions"])
    consumer.close()
    producer.close()
