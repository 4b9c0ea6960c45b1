"""The console's live pages as server-sent events, against a real broker: each event carries
what the REST route it stands for answers, bad queries are refused as by that route, and a
topic deleted under an open stream ends it with an error event."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pulsar
from e2e_helpers import new_topic, wait_until

OVERVIEW = "/admin/v2/console-stream/overview"
PAGE = "/admin/v2/console-stream/topics-page"


def rest(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def events(admin: httpx.Client, path: str, count: int, params: dict[str, Any] | None = None) \
        -> list[tuple[str, Any]]:
    """The first ``count`` events of the stream at ``path``, or fewer if it ends first."""
    got: list[tuple[str, Any]] = []
    name = ""
    with admin.stream("GET", path, params=params) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                got.append((name, json.loads(line[6:])))
                if len(got) == count:
                    break
    return got


def test_the_overview_stream_carries_the_load_report_and_rate_history(admin: httpx.Client) -> None:
    def same() -> bool:
        first = dict(events(admin, OVERVIEW, 2))
        return (first["load-report"] == admin.get("/admin/v2/broker-stats/load-report").json()
                and first["rate-history"] == admin.get("/admin/v2/broker-stats/rate-history").json())
    wait_until(same, timeout_s=30, what="the stream's answers and the REST answers alike")


def test_a_topic_stream_carries_its_partitions_and_stats(admin: httpx.Client, client: pulsar.Client) -> None:
    topic = new_topic("streamed")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"0123456789")

    def same() -> bool:
        (name, answer), = events(admin, rest(topic) + "/console-stream", 1)
        return name == "topic" and answer == {"partitions": admin.get(rest(topic) + "/partitions").json(),
                                              "stats": admin.get(rest(topic) + "/stats").json()}
    wait_until(same, timeout_s=30, what="the stream's answer and the REST answers alike")
    parted = new_topic("streamed-parted")
    assert admin.put(rest(parted) + "/partitions", json=2).status_code == 204
    client.subscribe(parted, "s").close()

    def same_parted() -> bool:
        (_, answer), = events(admin, rest(parted) + "/console-stream", 1)
        return answer == {"partitions": admin.get(rest(parted) + "/partitions").json(),
                          "stats": admin.get(rest(parted) + "/partitioned-stats",
                                             params={"perPartition": "true"}).json()}
    wait_until(same_parted, timeout_s=30, what="the partitioned topic's answers alike")
    assert events(admin, rest(parted) + "/console-stream", 1)[0][1]["partitions"]["partitions"] == 2
    consumer.close()
    producer.close()


def test_the_topics_page_stream_carries_the_page(admin: httpx.Client) -> None:
    prefix = new_topic("paged").rsplit("/", 1)[1]
    for i in range(4):
        assert admin.put(f"/admin/v2/persistent/public/default/{prefix}-{i}").status_code == 204
    query = {"search": prefix, "sort": "backlog", "order": "desc", "limit": 3, "offset": 1}

    def same() -> bool:
        (name, page), = events(admin, PAGE, 1, query)
        return name == "topics-page" and page == admin.get("/admin/v2/topics-page", params=query).json()
    wait_until(same, timeout_s=30, what="the stream's page and the REST page alike")
    assert events(admin, PAGE, 1, query)[0][1]["total"] == 4


def test_bad_stream_requests_are_refused_as_the_rest_routes_refuse_them(admin: httpx.Client) -> None:
    for params in ({"limit": 0}, {"limit": 1001}, {"sort": "colour"}, {"order": "up"}, {"offset": -1},
                   {"search": "x" * 1025}):
        streamed, answered = admin.get(PAGE, params=params), admin.get("/admin/v2/topics-page", params=params)
        assert streamed.status_code == answered.status_code == 400, params
        assert streamed.json() == answered.json()
    absent = rest(new_topic("absent"))
    assert admin.get(absent + "/console-stream").status_code == 404
    assert admin.get(absent + "/console-stream").json() == admin.get(absent + "/stats").json()
    assert admin.get("/admin/v2/persistent/public/nowhere/x/console-stream").status_code == 404
    assert admin.get("/admin/v2/persistent/no-tenant/default/x/console-stream").status_code == 404


def test_a_topic_deleted_under_its_stream_ends_it_with_an_error(admin: httpx.Client) -> None:
    topic = new_topic("doomed")
    assert admin.put(rest(topic)).status_code == 204
    got: list[tuple[str, Any]] = []
    name = ""
    with admin.stream("GET", rest(topic) + "/console-stream") as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                got.append((name, json.loads(line[6:])))
                if len(got) == 1:
                    assert admin.delete(rest(topic), params={"force": "true"}).status_code == 204
    assert got[0][0] == "topic"
    assert got[-1] == ("error", {"status": 404, "reason": "Topic not found"})
