"""A topic deleted while admin reads of it arrive stays deleted.

Deleting a topic awaits its release, its files and its cursors before its record goes; a read
that came in meanwhile (``lastMessageId``, internal stats: what a Spark query's planning
asks every trigger) used to load the topic again from that record, empty, and it lived on
after the deletion had answered 204.
"""

from __future__ import annotations

import threading
import uuid

import httpx
import pulsar
import pytest

from magnetar.testing.broker_process import BrokerProcess

ROUNDS = 15
READERS = 3


def _read_until(web_url: str, path: str, stop: threading.Event, answers: list[int]) -> None:
    with httpx.Client(base_url=web_url, timeout=10) as http:
        while not stop.is_set():
            answers.append(http.get(f"/admin/v2/{path}/lastMessageId").status_code)
            answers.append(http.get(f"/admin/v2/{path}/internalStats").status_code)


@pytest.mark.timeout(120)
def test_reads_during_a_deletion_do_not_bring_the_topic_back(broker: BrokerProcess, admin: httpx.Client,
                                                             client: pulsar.Client) -> None:
    back = []
    for _ in range(ROUNDS):
        topic = f"persistent://public/default/deleted-{uuid.uuid4().hex[:10]}"
        path = topic.replace("://", "/", 1)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(b"m%d" % i)
        producer.close()
        resp = admin.put(f"/admin/v2/{path}/subscription/held", json={"ledgerId": -1, "entryId": -1})
        assert resp.status_code == 204, resp.text
        stop, answers = threading.Event(), [[] for _ in range(READERS)]
        readers = [threading.Thread(target=_read_until, args=(broker.web_url, path, stop, answers[i]))
                   for i in range(READERS)]
        for reader in readers:
            reader.start()
        try:
            # the deletion runs while reads are in flight: wait until each reader has had answers
            for seen in answers:
                while len(seen) < 2:
                    stop.wait(0.005)
            resp = admin.delete(f"/admin/v2/{path}", params={"force": "true"})
        finally:
            stop.set()
            for reader in readers:
                reader.join(30)
        assert resp.status_code == 204, resp.text
        codes = {code for seen in answers for code in seen}
        assert codes <= {200, 404, 503}, codes  # 503 while it is being deleted: "retry shortly"
        after = admin.get(f"/admin/v2/{path}/lastMessageId")
        if after.status_code != 404:
            back.append((topic, after.status_code, after.text))
    assert back == [], f"deleted topics still answered: {back}"
    listed = admin.get("/admin/v2/persistent/public/default").json()
    assert not [t for t in listed if "/deleted-" in t], listed
