"""The web console in headless Chromium against a real broker with traffic from the official client.

One broker (bucket delayed delivery on, small ledgers) and one browser serve the whole
module. Every page is checked against the admin REST answers it is built from, with no
console error; actions go through the confirmation and change what REST reports.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import httpx
import pulsar
import pytest
from console_helpers import ConsolePage, chromium_context
from e2e_helpers import EARLIEST, nothing_arrives, quiet_logger, wait_until
from pulsar.schema import AvroSchema, Double, Integer, Record, String

from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.sim.options import AUTO_SPLIT_CONSISTENT
from magnetar.testing.sim.scenario import owners

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName": "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
    "delayedDeliveryMinIndexCountPerBucket": "10",
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": "5",
    "managedLedgerMaxEntriesPerLedger": "20",
}
PAGE_TIMEOUT_MS = 10_000


class Reading(Record):
    sensor = String()
    value = Double()
    count = Integer()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("console") / "data", CONFIG).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium_context() as context:
        yield context


@pytest.fixture
def console(browser: Any, broker: BrokerProcess) -> Iterator[ConsolePage]:
    page = ConsolePage(browser, broker.web_url)
    yield page
    page.close()


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.web_url, timeout=10) as c:
        yield c


def name(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def rest(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def route(kind: str, topic: str, tail: str = "") -> str:
    return f"/{kind}/" + topic.replace("://", "/") + tail


def expect() -> Any:
    from playwright.sync_api import expect as playwright_expect
    playwright_expect.set_options(timeout=PAGE_TIMEOUT_MS)
    return playwright_expect


def test_the_broker_serves_the_console_from_its_package(admin: httpx.Client) -> None:
    root = admin.get("/", follow_redirects=False)
    assert root.status_code == 302 and root.headers["location"] == "/console/"
    page = admin.get("/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "<script src=\"console.js\"></script>" in page.text and "http" not in page.text.split("<body>")[1]
    chart = admin.get("/console/vendor/uPlot.iife.min.js")
    assert chart.status_code == 200 and chart.headers["content-type"].startswith("text/javascript")
    for missing in ("/console/nothing.js", "/console/../pyproject.toml", "/console/%2e%2e/__init__.py",
                    "/console/vendor/uPlot.LICENSE"):
        assert admin.get(missing).status_code == 404, missing


def test_overview_shows_the_totals_rest_reports_and_the_rate_history(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    topic = name("overview")
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(30):
        producer.send(f"m{i}".encode())
    def history() -> list[dict[str, Any]]:
        return list(admin.get("/admin/v2/broker-stats/rate-history").json()["samples"])
    wait_until(lambda: any(s["msgRateIn"] > 0 for s in history()), timeout_s=15, what="a sample with the traffic")
    report = wait_until(lambda: (r := admin.get("/admin/v2/broker-stats/load-report").json())["numConsumers"] >= 1
                        and r["msgBacklog"] >= 30 and r, timeout_s=15, what="a sample with the consumer and backlog")
    page = console.open("/overview")
    check = expect()
    for field in ("numTopics", "numProducers", "numConsumers", "numSubscriptions", "msgBacklog", "numNamespaces"):
        check(page.locator(f"#totals [data-field={field}] .value")).to_have_text(f"{report[field]:,}")
    check(page.locator("#rate-charts canvas")).to_have_count(2)
    check(page.locator("#history-note")).to_contain_text("samples, one every 5 s")
    drawn = page.evaluate("Number(document.getElementById('history-note').textContent.split(' ')[0])")
    assert drawn >= 1
    check(page.locator("#tenant-table")).to_contain_text("public/default")
    check(page.locator("#cluster")).to_contain_text("standalone")
    console.screenshot("overview.png")
    assert console.errors == []
    consumer.close()
    producer.close()


def test_topics_page_searches_sorts_and_pages_on_the_server(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    tag = uuid.uuid4().hex[:6]
    for i in range(55):
        assert admin.put(f"/admin/v2/persistent/public/default/list-{tag}-{i:02d}").status_code == 204
    assert admin.put(f"/admin/v2/persistent/public/default/list-{tag}-parted/partitions", json=3).status_code == 204
    full = f"persistent://public/default/list-{tag}-07"
    producer = client.create_producer(full, batching_enabled=False)
    client.subscribe(full, "held").close()
    for _ in range(5):
        producer.send(b"x")
    answer = admin.get("/admin/v2/topics-page", params={"search": f"list-{tag}", "limit": 50}).json()
    assert answer["total"] == 56 and len(answer["topics"]) == 50
    parted = admin.get("/admin/v2/topics-page", params={"search": f"list-{tag}-parted"}).json()["topics"]
    assert [(t["name"], t["partitions"]) for t in parted] == [(f"persistent://public/default/list-{tag}-parted", 3)]

    page = console.open(f"/topics?search=list-{tag}")
    check = expect()
    check(page.locator("#topic-count")).to_have_text("1–50 of 56")
    check(page.locator("#topic-table tbody tr[data-row]")).to_have_count(50)
    page.click("#next-page")
    check(page.locator("#topic-count")).to_have_text("51–56 of 56")
    check(page.locator(f"#topic-table tr[data-row='persistent://public/default/list-{tag}-parted']"))\
        .to_contain_text("3 partitions")
    page.click("#topic-table th[data-sort=backlog]")
    check(page.locator("#topic-count")).to_have_text("1–50 of 56")
    first = page.locator("#topic-table tbody tr[data-row]").first
    check(first).to_have_attribute("data-row", full)
    check(first.locator("td[data-backlog]")).to_have_text("5")
    assert "sort=backlog" in page.url and "order=desc" in page.url
    page.fill("#topic-search", f"list-{tag}-parted")
    check(page.locator("#topic-count")).to_have_text("1–1 of 1")
    assert console.errors == []
    producer.close()


def test_topics_page_creates_topics_and_refuses_a_name_that_is_not_one(console: ConsolePage,
                                                                       admin: httpx.Client) -> None:
    plain, parted = name("made"), name("made-parted")
    page = console.open("/topics")
    page.fill("#new-topic", plain)
    page.click("#create-topic-button")
    page.click("#confirm-cancel")
    assert plain not in admin.get("/admin/v2/persistent/public/default").json()
    console.act("#create-topic-button")
    assert plain in admin.get("/admin/v2/persistent/public/default").json()
    page.fill("#new-topic", parted)
    page.fill("#new-topic-partitions", "3")
    console.act("#create-topic-button")
    assert admin.get(rest(parted) + "/partitions").json()["partitions"] == 3
    before = admin.get("/admin/v2/persistent/public/default").json()
    page.fill("#new-topic", "made-without-a-namespace")
    console.confirm("#create-topic-button")
    check = expect()
    check(page.locator("#action-status [data-outcome=error]")).to_contain_text("Give a full name")
    assert admin.get("/admin/v2/persistent/public/default").json() == before
    assert console.errors == []


def test_topic_page_shows_what_the_stats_say(console: ConsolePage, client: pulsar.Client,
                                             admin: httpx.Client) -> None:
    topic = name("orders")
    assert admin.put(rest(topic)).status_code == 204
    assert admin.post(rest(topic) + "/deduplicationEnabled", json=True).status_code == 204
    producer = client.create_producer(topic, producer_name="writer", batching_enabled=False,
                                      schema=pulsar.schema.StringSchema())
    consumer = client.subscribe(topic, "audit", consumer_type=pulsar.ConsumerType.Shared, consumer_name="reader",
                                schema=pulsar.schema.StringSchema(), receiver_queue_size=50)
    for i in range(12):
        producer.send(f"order {i}", properties={"n": str(i)})
    for _ in range(4):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    stats = wait_until(lambda: (s := admin.get(rest(topic) + "/stats").json())["subscriptions"]["audit"]
                       ["unackedMessages"] == 8 and s, what="8 unacked")
    page = console.open(route("topic", topic))
    check = expect()
    check(page.locator("#topic-cards [data-field=msgInCounter] .value")).to_have_text(str(stats["msgInCounter"]))
    dedup = wait_until(lambda: admin.get(rest(topic) + "/internalStats").json()["cursors"].get("pulsar.dedup"),
                       what="the dedup cursor")
    assert dedup["properties"] == {"writer": 11}
    check(page.locator("#topic-cards [data-field=deduplicationStatus] .value")).to_have_text("Enabled")
    check(page.locator("#producer-table tbody tr")).to_contain_text("writer")
    check(page.locator("#producer-table tbody tr td").nth(2)).to_have_text("11")
    row = page.locator("#subscription-table tr[data-subscription=audit]")
    check(row.locator("[data-field=msgBacklog]")).to_have_text(str(stats["subscriptions"]["audit"]["msgBacklog"]))
    check(row.locator("[data-field=unackedMessages]")).to_have_text("8")

    def permits() -> str:
        audit = admin.get(rest(topic) + "/stats").json()["subscriptions"]["audit"]
        return f'{audit["consumers"][0]["availablePermits"]:,}'
    cell = "#subscription-table tr[data-consumer=reader] [data-field=availablePermits]"
    wait_until(lambda: console.text(cell) == permits(), what="permits shown as REST reports them")
    check(page.locator("#schemas")).to_contain_text("Version 0: STRING")
    check(page.locator("#policy-table")).to_contain_text("maxUnackedMessagesOnConsumer")
    check(page.locator("#ledger-table")).to_be_visible()
    check(page.locator("#unload-topic")).to_be_visible()
    console.screenshot("topic.png")
    assert console.errors == []
    consumer.close()
    producer.close()


def _key_owned_after_c2_joins(by: str) -> str:
    after = owners(AUTO_SPLIT_CONSISTENT, ["c1", "c2"])
    return next(k for k in (f"blk{i}" for i in range(10_000)) if after(sticky_key_hash(k.encode())) == by)


def test_key_shared_view_names_the_draining_hash_and_the_messages_that_block_it(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    topic = name("ks")
    key = _key_owned_after_c2_joins("c2")
    sticky_hash = sticky_key_hash(key.encode())
    producer = client.create_producer(topic, batching_enabled=False)
    c1 = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="c1",
                          initial_position=EARLIEST, receiver_queue_size=100)
    held_ids = [producer.send(f"{key}:{i}".encode(), partition_key=key) for i in range(3)]
    held = [c1.receive(timeout_millis=5000) for _ in range(3)]
    c2 = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="c2",
                          initial_position=EARLIEST, receiver_queue_size=100)
    producer.send(f"{key}:3".encode(), partition_key=key)
    assert nothing_arrives(c2, 500)
    pending = admin.get(rest(topic) + "/subscription/ks/consumer/c1/pendingMessages",
                        params={"stickyKeyHash": sticky_hash}).json()["pendingMessages"]
    assert [m["messageId"] for m in pending] == [f"{i.ledger_id()}:{i.entry_id()}:-1" for i in held_ids]

    page = console.open(route("subscription", topic, "/ks"))
    check = expect()
    check(page.locator("#sub-cards [data-field=drainingHashesCount] .value")).to_have_text("1")
    check(page.locator("#hash-space .range")).to_have_count(
        sum(len(c["keyHashRangeArrays"]) for c in admin.get(rest(topic) + "/stats").json()
            ["subscriptions"]["ks"]["consumers"]))
    check(page.locator(f"#hash-space .drain[data-hash='{sticky_hash}']")).to_have_count(1)
    row = page.locator(f"#draining-table tr[data-draining-hash='{sticky_hash}']")
    check(row).to_contain_text("c1")
    check(row.locator("td").nth(4)).to_have_text("c2")
    check(row.locator("[data-field=blockingMessages]")).to_contain_text(", ".join(
        f"{m['messageId']} (key {key})" for m in pending))
    console.screenshot("key-shared.png")
    for msg in held:
        c1.acknowledge(msg)
    check(page.locator("#no-draining")).to_be_visible()
    assert c2.receive(timeout_millis=5000).data() == f"{key}:3".encode()
    assert console.errors == []
    c1.close()
    c2.close()
    producer.close()


def test_delayed_delivery_subscription_shows_its_buckets(console: ConsolePage, client: pulsar.Client,
                                                         admin: httpx.Client) -> None:
    topic = name("delayed")
    consumer = client.subscribe(topic, "later", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    deliver_at = int(time.time() * 1000) + 600_000
    for i in range(60):
        producer.send(f"d{i}".encode(), deliver_at=deliver_at + i)
    index = wait_until(lambda: (d := admin.get(rest(topic) + "/subscription/later/delayedIndex").json()
                                ["partitions"][0])["buckets"] and d["messages"] == 60 and d,
                       timeout_s=15, what="sealed buckets")
    assert index["tracker"] == "bucket" and deliver_at - 1000 <= index["nextDeliveryTime"] <= deliver_at
    page = console.open(route("subscription", topic, "/later"))
    check = expect()
    check(page.locator("[data-field=delayedMessages] .value")).to_have_text("60")
    check(page.locator("[data-field=delayedTracker] .value")).to_have_text("bucket")
    rows = page.locator("#bucket-table tbody tr")
    check(rows).to_have_count(len(index["buckets"]) + 1)
    first = index["buckets"][0]
    check(rows.first).to_contain_text(f"{first['startLedgerId']}..{first['endLedgerId']}")
    check(rows.first).to_contain_text(str(first["messages"]))
    check(page.locator("#sub-cards [data-field=msgDelayed] .value")).to_have_text("60")
    assert console.errors == []
    consumer.close()
    producer.close()


def test_message_browser_decodes_shows_markup_as_text_and_acknowledges_nothing(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    topic = name("browse")
    client.subscribe(topic, "peek").close()
    json_producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    evil = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    futures = [json_producer.send_async(json.dumps({"id": i}).encode(), None, partition_key=f"k{i}",
                                        properties={"p": "<b>bold</b>"}) for i in range(3)]
    json_producer.flush()
    del futures
    json_producer.send(evil.encode(), properties={"<i>": evil})
    json_producer.close()
    plain = client.create_producer(topic, batching_enabled=False)
    for i in range(25):
        plain.send(f"later {i}".encode())
    before = admin.get(rest(topic) + "/stats").json()["subscriptions"]["peek"]["msgBacklog"]

    page = console.open(route("messages", topic, "?mode=peek&sub=peek&count=5"))
    check = expect()
    rows = page.locator("#message-table tbody tr.message")
    check(rows).to_have_count(7)
    first_id = rows.first.get_attribute("data-message-id")
    assert first_id is not None and first_id.endswith(":0")
    check(rows.first.locator("[data-field=key]")).to_have_text("k0")
    check(rows.first.locator("pre.payload")).to_have_text('{"id": 0}')
    check(rows.first.locator("[data-property=p]")).to_have_text("p = <b>bold</b>")
    script_row = rows.nth(3)
    check(script_row.locator("pre.payload")).to_have_text(evil)
    check(script_row.locator("[data-property='<i>']")).to_have_text(f"<i> = {evil}")
    assert page.locator("#message-table script, #message-table img, #message-table b").count() == 0
    assert page.evaluate("window.pwned") is None
    console.screenshot("messages.png")

    internal = admin.get(rest(topic) + "/internalStats").json()
    second_ledger = internal["ledgers"][1]["ledgerId"]
    last_of_first = internal["ledgers"][0]["entries"] - 1
    first_ledger = internal["ledgers"][0]["ledgerId"]
    console.open(route("messages", topic, f"?mode=position&from={first_ledger}:{last_of_first}&count=3&view=hex"))
    check(rows).to_have_count(3)
    check(rows.nth(1)).to_have_attribute("data-message-id", f"{second_ledger}:0")
    check(rows.first.locator("pre.payload")).to_contain_text("6c 61 74 65 72")
    assert admin.get(rest(topic) + "/stats").json()["subscriptions"]["peek"]["msgBacklog"] == before
    assert console.errors == []
    plain.close()


def test_actions_ask_first_and_change_what_rest_reports(console: ConsolePage, client: pulsar.Client,
                                                        admin: httpx.Client) -> None:
    topic = name("acts")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"a{i}".encode()) for i in range(10)]
    producer.close()
    check = expect()

    def backlog(sub: str) -> int:
        return int(admin.get(rest(topic) + "/stats").json()["subscriptions"][sub]["msgBacklog"])

    page = console.open(route("topic", topic))
    page.fill("#new-subscription", "ops")
    page.select_option("#new-subscription-position", "earliest")
    page.click("#create-subscription")
    page.click("#confirm-cancel")
    assert admin.get(rest(topic) + "/subscriptions").json() == []
    console.act("#create-subscription")
    wait_until(lambda: admin.get(rest(topic) + "/subscriptions").json() == ["ops"], what="subscription created")
    assert backlog("ops") == 10

    page = console.open(route("subscription", topic, "/ops"))
    page.fill("#skip-count", "3")
    console.act("#skip-messages")
    wait_until(lambda: backlog("ops") == 7, what="3 skipped")
    check(page.locator("#sub-cards [data-field=msgBacklog] .value")).to_have_text("7")
    console.act("#clear-backlog")
    wait_until(lambda: backlog("ops") == 0, what="backlog cleared")
    page.fill("#reset-position", f"{ids[5].ledger_id()}:{ids[5].entry_id()}")
    console.act("#reset-by-position")
    wait_until(lambda: backlog("ops") == 5, what="cursor reset to the 6th message")
    page.fill("#reset-time", "60")
    console.act("#reset-by-time")
    wait_until(lambda: backlog("ops") == 10, what="cursor reset an hour back")
    console.confirm("#delete-subscription")
    wait_until(lambda: admin.get(rest(topic) + "/subscriptions").json() == [], what="subscription deleted")

    page = console.open(route("topic", topic))
    console.act("#compact-topic")
    wait_until(lambda: admin.get(rest(topic) + "/compaction").json()["status"] in ("RUNNING", "SUCCESS"),
               what="compaction started")
    console.act("#unload-topic")
    console.act("#terminate-topic")
    with pytest.raises(Exception, match="(?i)terminated"):
        client.create_producer(topic).send(b"after")
    console.confirm("#delete-topic")
    check(page.locator("#topic-search")).to_be_visible()
    assert admin.get(rest(topic) + "/stats").status_code == 404
    assert console.errors == []


def test_message_browser_decodes_avro_and_reads_from_a_publish_time(console: ConsolePage, client: pulsar.Client,
                                                                   admin: httpx.Client) -> None:
    topic = name("avro")
    producer = client.create_producer(topic, schema=AvroSchema(Reading), batching_enabled=False)
    first = producer.send(Reading(sensor="early", value=0.5, count=1))
    examined = admin.get(rest(topic) + f"/ledger/{first.ledger_id()}/entry/{first.entry_id()}")
    published = examined.headers["X-Pulsar-publish-time"]
    cut = int(datetime.datetime.strptime(published, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > cut, what="the clock past the first publish")
    producer.send(Reading(sensor="<s>late</s>", value=-2.25, count=-7), event_timestamp=cut)
    page = console.open(route("messages", topic, f"?mode=time&from={cut}&count=5"))
    check = expect()
    rows = page.locator("#message-table tbody tr.message")
    check(rows).to_have_count(1)
    decoded = json.loads(rows.first.locator("pre.payload").inner_text())
    assert decoded == {"sensor": "<s>late</s>", "value": -2.25, "count": -7}
    check(rows.first.locator("td").nth(5)).to_contain_text("AVRO")
    assert console.errors == []
    producer.close()


def test_namespace_actions_on_the_overview(console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    namespace = f"public/cns{uuid.uuid4().hex[:6]}"
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    topic = f"persistent://{namespace}/backlogged"
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(4):
        producer.send(b"x")
    producer.close()

    def row() -> dict[str, Any]:
        return dict(admin.get("/admin/v2/topics-page", params={"search": topic}).json()["topics"][0])
    assert row()["backlog"] == 4 and row()["loaded"] is True
    page = console.open("/overview")
    page.wait_for_selector(f"[id='clear-ns-{namespace}']")
    console.act(f"[id='clear-ns-{namespace}']")
    assert row()["backlog"] == 0
    console.act(f"[id='unload-ns-{namespace}']")
    assert row()["loaded"] is False
    assert console.errors == []


def test_non_persistent_and_partitioned_topics_pages_load_without_errors(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    volatile = name("np").replace("persistent://", "non-persistent://")
    np_consumer = client.subscribe(volatile, "s")
    np_producer = client.create_producer(volatile)
    np_producer.send(b"a")
    parted = name("pp")
    assert admin.put(rest(parted) + "/partitions", json=2).status_code == 204
    consumer = client.subscribe(parted, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(parted)
    for i in range(4):
        producer.send(b"x", partition_key=str(i))
    check = expect()
    page = console.open(route("topic", volatile))
    check(page.locator("#subscription-table tr[data-subscription=s]")).to_be_visible()
    check(page.locator("#storage")).to_contain_text("stores nothing")
    page = console.open(route("subscription", volatile, "/s"))
    check(page.locator("#sub-cards [data-field=type] .value")).to_have_text("Exclusive")
    page = console.open(route("messages", volatile, "?mode=peek&sub=s"))
    check(page.locator("#no-messages")).to_be_visible()
    page = console.open(route("topic", parted))
    check(page.locator("#topic-cards [data-field=partitions] .value")).to_have_text("2")
    check(page.locator("#partition-table tbody tr")).to_have_count(2)
    check(page.locator("#topic-cards [data-field=msgInCounter] .value")).to_have_text("4")
    page = console.open(route("subscription", parted, "/s"))
    page.click("#sub-cards a >> nth=0")
    check(page.locator("#sub-cards [data-field=type] .value")).to_have_text("Key_Shared")
    check(page.locator("#hash-space .range")).to_have_count(1)
    page = console.open(route("messages", parted))
    page.click("#main a >> nth=1")
    check(page.locator("#browse-mode")).to_be_visible()
    assert console.errors == []
    for c in (np_consumer, consumer):
        c.close()
    for p in (np_producer, producer):
        p.close()


def test_message_browser_decodes_key_value_payloads(console: ConsolePage, client: pulsar.Client,
                                                    admin: httpx.Client) -> None:
    topic = name("kv")
    value_schema = json.loads(AvroSchema(Reading).schema_info().schema())
    schema = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": value_schema}),
              "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"}}
    local = topic.rsplit("/", 1)[1]
    assert admin.post(f"/admin/v2/schemas/public/default/{local}/schema", json=schema).status_code == 200
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(value_schema),
                               {"sensor": "s<1>", "value": 1.5, "count": 3})
    key, value = b"room-7", buffer.getvalue()
    payload = struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(payload)
    page = console.open(route("messages", topic, "?mode=peek&sub=s&count=1"))
    check = expect()
    cell = page.locator("#message-table tbody tr.message pre.payload")
    check(cell).to_have_count(1)
    assert json.loads(cell.inner_text()) == {"key": "room-7", "value": {"sensor": "s<1>", "value": 1.5, "count": 3}}
    assert console.errors == []
    producer.close()


def test_a_topic_page_follows_the_broker_s_events_and_lets_go_while_hidden(
        console: ConsolePage, client: pulsar.Client, admin: httpx.Client) -> None:
    topic = name("followed")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"first")
    asked: list[str] = []
    console.page.on("request", lambda request: asked.append(request.url))
    page = console.open(route("topic", topic))
    check = expect()
    card = page.locator("#topic-cards [data-field=msgInCounter] .value")
    check(card).to_have_text("1")
    page.wait_for_selector("#main[data-streams='1']", state="attached")
    for _ in range(2):
        producer.send(b"more")
    check(card).to_have_text("3")  # drawn from a pushed event: the page asked for nothing more
    # once: the check the page makes before it draws anything
    assert len([url for url in asked if url.endswith("/stats")]) == 1
    assert len([url for url in asked if url.endswith("/console-stream")]) == 1
    # a hidden tab lets its stream go; shown again, it opens a new one and is current again
    page.evaluate("Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"
                  "document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_selector("#main[data-streams='0']", state="attached")
    producer.send(b"while hidden")
    page.evaluate("Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
                  "document.dispatchEvent(new Event('visibilitychange'))")
    check(card).to_have_text("4")
    assert len([url for url in asked if url.endswith("/console-stream")]) == 2
    assert admin.get(rest(topic) + "/stats").json()["msgInCounter"] == 4
    producer.close()
