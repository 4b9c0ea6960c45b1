"""On a cluster's broker (metadata in ZooKeeper) the admin REST API, and a topic's load
for the binary protocol, never wait on a ZooKeeper round trip on the event loop's thread.

A broker service over a real ZooKeeper chroot, its admin app driven in process; every round
trip of the store's kazoo session (a cache miss or a write, each waiting for the ensemble)
is recorded with the thread it ran on. Each admin route that reads or writes the store is
called, and the test fails if any round trip ran on the loop's thread, or if a write route
made none at all (then it did not reach ZooKeeper and proves nothing). Answers are checked
too, errors included, so moving the calls changed none of them. Topics are loaded as a
PRODUCER or SUBSCRIBE loads them too (``BrokerService.load_topic``), with what they have
stored (cursors, a deduplication snapshot, a partition's record) read back.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from magnetar.admin.app import create_app
from magnetar.cli.cluster_init import ClusterInit, initialize
from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.bucket import bucket_key, build_snapshot
from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.triple_long_priority_queue import pack
from magnetar.core.errors import TopicNotFound
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics.topic import Topic
from magnetar.server.broker_service import BrokerService
from magnetar.storage.ledger_bucket_snapshot_storage import LedgerBucketSnapshotStorage
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
from magnetar.testing.zookeeper_process import ZooKeeperProcess

CLUSTER = "off-loop"
NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default"


class RoundTrips:
    """Wraps the kazoo session's one waiting point: the thread of each round trip."""

    def __init__(self, wait: Callable[[Any], Any]) -> None:
        self._wait = wait
        self.threads: list[int] = []

    def __call__(self, result: Any) -> Any:
        self.threads.append(threading.get_ident())
        return self._wait(result)


Call = Callable[..., Awaitable[Any]]
Load = Callable[..., Awaitable[Topic]]


def served(zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           steps: Callable[[Call, Load], Awaitable[None]],
           stored: Callable[[BrokerService], None] | None = None, **settings: Any) -> list[str]:
    """Run ``steps`` against the admin app of a broker over a fresh chroot; the requests
    (and loads) that made a ZooKeeper round trip on the loop's thread. ``call(method, path,
    status, body, writes=..., **params)`` checks the answer's status and returns its JSON;
    with ``writes`` it also checks that the request reached ZooKeeper at all. ``load(topic,
    create, writes=...)`` loads a topic as the binary protocol does, checked the same way.
    ``stored(broker)``, run on another thread once the broker serves, writes what it then
    finds in the store (as another broker would); ``settings`` configure it."""
    url = zookeeper.url(f"/admin-off-loop-{uuid.uuid4().hex[:8]}")
    initialize(ClusterInit(CLUSTER, url, "http://127.0.0.1:8080", "pulsar://127.0.0.1:6650"))
    broker = BrokerService(BrokerConfig(metadataStoreUrl=url, clusterName=CLUSTER, **settings), tmp_path)
    store = broker.metadata
    assert isinstance(store, ZooKeeperMetadataStore)
    trips = RoundTrips(store._zk._wait)
    # as a cluster's broker does when it takes a bundle over, off the loop: ledger ids to hand out
    broker.ledger_ids.restart_from(store.reserve_ledger_ids(broker.ledger_ids.block))

    async def scenario() -> list[str]:
        broker.start(asyncio.get_running_loop())
        try:
            return await requests()
        finally:
            await broker.close()

    async def requests() -> list[str]:
        monkeypatch.setattr(store._zk, "_wait", trips)  # from here on: the broker serves
        loop_thread = threading.get_ident()
        on_loop: list[str] = []
        app = create_app(broker)
        if stored is not None:
            await asyncio.to_thread(stored, broker)

        def check(what: str, before: int, writes: bool) -> None:
            made = trips.threads[before:]
            if loop_thread in made:
                on_loop.append(what)
            assert made or not writes, f"{what} made no round trip"

        async def load(topic: str, create: bool, *, writes: bool = False,
                       until: Callable[[Topic], bool] | None = None) -> Topic:
            """The topic loaded; with ``until``, then waited for until it holds (what the
            broker does meanwhile counts as the load's)."""
            before = len(trips.threads)
            loaded = await broker.load_topic(TopicName.parse(topic), create)
            deadline = time.monotonic() + 10
            while until is not None and not until(loaded):
                assert time.monotonic() < deadline, f"{topic} did not come to what was awaited"
                await asyncio.sleep(0.02)
            check(f"load {topic}", before, writes)
            return loaded

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://broker") as http:
            async def call(method: str, path: str, status: int = 200, body: Any = None, *, writes: bool = False,
                           **params: Any) -> Any:
                before = len(trips.threads)
                answer = await http.request(method, path, json=body, params=params or None)
                assert answer.status_code == status, (method, path, answer.text)
                check(f"{method} {path}", before, writes)
                return answer.json() if answer.content else None
            await steps(call, load)
        assert trips.threads, "the store was never asked"
        return on_loop

    try:
        return asyncio.run(scenario())
    finally:
        store.close()


async def admin_requests(call: Call, _: Load) -> None:
    # tenants and clusters
    await call("PUT", "/admin/v2/clusters/other", 204, {"serviceUrl": "http://o:8080"}, writes=True)
    await call("PUT", "/admin/v2/clusters/other", 409, {"serviceUrl": "http://o:8080"})
    await call("POST", "/admin/v2/clusters/other", 204, {"serviceUrl": "http://o:8081"}, writes=True)
    assert (await call("GET", "/admin/v2/clusters/other"))["serviceUrl"] == "http://o:8081"
    assert await call("GET", "/admin/v2/clusters") == [CLUSTER, "other"]
    await call("PUT", "/admin/v2/tenants/t", 204, {"allowedClusters": [CLUSTER, "other"]}, writes=True)
    await call("PUT", "/admin/v2/tenants/t", 409, {"allowedClusters": [CLUSTER]})
    await call("PUT", "/admin/v2/tenants/u", 412, {"allowedClusters": ["nowhere"]})
    await call("POST", "/admin/v2/tenants/t", 204, {"adminRoles": ["ops"], "allowedClusters": [CLUSTER]},
               writes=True)
    assert (await call("GET", "/admin/v2/tenants/t"))["adminRoles"] == ["ops"]
    assert await call("GET", "/admin/v2/tenants") == ["public", "t"]
    await call("DELETE", "/admin/v2/clusters/other", 204, writes=True)
    await call("DELETE", "/admin/v2/clusters/other", 404)
    # namespaces and their policies
    await call("PUT", "/admin/v2/namespaces/t/ns", 204, writes=True)
    await call("PUT", "/admin/v2/namespaces/t/ns", 409)
    await call("PUT", "/admin/v2/namespaces/nobody/ns", 404)
    assert await call("GET", "/admin/v2/namespaces/t") == ["t/ns"]
    await call("POST", f"{NS}/retention", 204, {"retentionTimeInMinutes": 5, "retentionSizeInMB": 10},
               writes=True)
    assert (await call("GET", f"{NS}/retention"))["retentionTimeInMinutes"] == 5
    await call("POST", f"{NS}/messageTTL", 412, -1)
    await call("POST", f"{NS}/backlogQuota", 204, {"limitSize": 1 << 20, "policy": "producer_request_hold"},
               writes=True)
    assert "destination_storage" in await call("GET", f"{NS}/backlogQuotaMap")
    await call("DELETE", f"{NS}/backlogQuota", 204, writes=True)
    await call("POST", f"{NS}/dispatchRate", 204, {"dispatchThrottlingRateInMsg": 100}, writes=True)
    assert (await call("GET", f"{NS}/dispatchRate"))["dispatchThrottlingRateInMsg"] == 100
    await call("DELETE", f"{NS}/dispatchRate", 204, writes=True)
    await call("POST", f"{NS}/subscriptionAuthMode", 204, "Prefix", writes=True)
    assert await call("GET", f"{NS}/subscriptionAuthMode") == "Prefix"
    await call("PUT", f"{NS}/schemaCompatibilityStrategy", 204, "FULL", writes=True)
    await call("POST", f"{NS}/permissions/app", 204, ["produce"], writes=True)
    await call("POST", f"{NS}/permissions/ ", 400, ["produce"])
    assert await call("GET", f"{NS}/permissions") == {"app": ["produce"]}
    await call("POST", f"{NS}/permissions/subscription/sub", 204, ["app"], writes=True)
    await call("DELETE", f"{NS}/permissions/sub/app", 204, writes=True)
    await call("DELETE", f"{NS}/permissions/app", 204, writes=True)
    await call("POST", f"{NS}/replication", 204, [CLUSTER])
    await call("POST", f"{NS}/replication", 403, ["nowhere"])
    assert (await call("GET", NS))["retention_policies"]["retentionSizeInMB"] == 10
    assert len((await call("GET", f"{NS}/bundles"))["boundaries"]) == 5
    # topics, partitioned topics, topic policies, schemas
    await call("PUT", f"{TOPIC}/plain", 204, writes=True)
    await call("PUT", f"{TOPIC}/plain", 409)
    await call("PUT", f"{TOPIC}/parted/partitions", 204, 2, writes=True)
    await call("POST", f"{TOPIC}/parted/partitions", 204, 3, writes=True)
    await call("POST", f"{TOPIC}/parted/partitions", 422, 3)
    assert (await call("GET", f"{TOPIC}/parted/partitions"))["partitions"] == 3
    assert await call("GET", f"{TOPIC}/partitioned") == ["persistent://public/default/parted"]
    assert "persistent://public/default/plain" in await call("GET", TOPIC)
    await call("POST", f"{TOPIC}/plain/messageTTL", 204, messageTTL=60, writes=True)
    assert await call("GET", f"{TOPIC}/plain/messageTTL") == 60
    await call("POST", f"{TOPIC}/plain/retention", 204, {"retentionTimeInMinutes": 1,
                                                           "retentionSizeInMB": 1}, writes=True)
    assert "destination_storage" in await call("GET", f"{TOPIC}/plain/backlogQuotaMap", applied=True)
    await call("DELETE", f"{TOPIC}/plain/retention", 204, writes=True)
    await call("POST", f"{TOPIC}/missing/messageTTL", 404, messageTTL=60)
    schema = {"type": "STRING", "schema": "", "properties": {}}
    assert (await call("POST", "/admin/v2/schemas/public/default/plain/schema", 200, schema,
                       writes=True))["version"] == {"version": 0}
    assert (await call("GET", "/admin/v2/schemas/public/default/plain/schema"))["type"] == "STRING"
    await call("DELETE", f"{TOPIC}/plain", 204, writes=True)
    await call("DELETE", f"{TOPIC}/parted/partitions", 204, writes=True)
    await call("GET", f"{TOPIC}/plain/internalStats", 404)
    # and away again
    await call("DELETE", "/admin/v2/namespaces/t/ns", 204, writes=True)
    await call("DELETE", "/admin/v2/tenants/t", 204, writes=True)
    await call("GET", "/admin/v2/tenants/t", 404)


def test_admin_routes_make_no_zookeeper_round_trip_on_the_event_loop(
        zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop = served(zookeeper, tmp_path, monkeypatch, admin_requests)
    assert on_loop == [], f"ZooKeeper round trips on the event loop's thread: {on_loop}"


async def topic_load(call: Call, _: Load) -> None:
    await call("PUT", f"{TOPIC}/loaded", 204, writes=True)
    assert (await call("GET", f"{TOPIC}/loaded/internalStats"))["entriesAddedCounter"] == 0
    # termination stores the topic's last message id in its properties
    assert (await call("POST", f"{TOPIC}/loaded/terminate", writes=True))["entryId"] == -1


def test_loading_a_topic_through_the_admin_api_makes_no_round_trip_on_the_event_loop(
        zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert served(zookeeper, tmp_path, monkeypatch, topic_load) == []


async def binary_loads(call: Call, load: Load) -> None:
    await call("POST", f"{NS}/deduplication", 204, True, writes=True)
    # a new topic, created by its load: its record written, its creation time recorded
    fresh = await load("persistent://public/default/fresh", True, writes=True)
    assert fresh.dedup is not None and fresh.created_ms > 0
    await call("PUT", f"{TOPIC}/fresh/subscription/sub", 204, writes=True)
    await call("PUT", f"{TOPIC}/fresh/unload", 204, writes=True)
    # loaded again from what it stored: its subscription, its creation time, its dedup snapshot
    again = await load("persistent://public/default/fresh", False, writes=True)
    assert list(again.subscriptions) == ["sub"] and again.created_ms == fresh.created_ms
    assert again.dedup is not None
    # a partition of a partitioned topic: its record written as it loads
    await call("PUT", f"{TOPIC}/parted/partitions", 204, 2, writes=True)
    assert str((await load("persistent://public/default/parted-partition-1", False, writes=True)).name) \
        == "persistent://public/default/parted-partition-1"
    assert "persistent://public/default/parted-partition-1" in await call("GET", TOPIC)
    await load("non-persistent://public/default/passing", True)
    with pytest.raises(TopicNotFound):
        await load("persistent://public/default/absent", False)


async def dedup_turned_on(call: Call, load: Load) -> None:
    topic = await load("persistent://public/default/later", True, writes=True)
    assert topic.dedup is None
    await call("POST", f"{TOPIC}/later/deduplicationEnabled", 204, True, writes=True)
    # the loaded topic follows (during the POST or after it): its snapshot read, deduplication recovered
    await load("persistent://public/default/later", False, until=lambda t: t.dedup is not None)


def test_deduplication_turned_on_for_a_loaded_topic_reads_its_snapshot_off_the_event_loop(
        zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert served(zookeeper, tmp_path, monkeypatch, dedup_turned_on) == []


def test_loading_topics_as_the_binary_protocol_does_makes_no_round_trip_on_the_event_loop(
        zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert served(zookeeper, tmp_path, monkeypatch, binary_loads) == []


DELAYED = "persistent://public/default/delayed"
BUCKETS = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"


def stored_bucket(broker: BrokerService) -> None:
    """A subscription whose delayed messages (due in an hour) are in a bucket snapshot on
    disk, written through a session of its own, as the broker that served the topic before
    left it (this broker's start-up sweep has not read its registry entry)."""
    assert isinstance(broker.metadata, ZooKeeperMetadataStore)
    with ZooKeeperMetadataStore(broker.metadata.url) as other:
        other.create_topic(DELAYED)
        due = int(time.time() * 1000) + 3_600_000
        metadata, segments = build_snapshot([pack(due, 1, 0), pack(due + 1, 1, 1)], 300_000, -1)
        bucket_id = LedgerBucketSnapshotStorage(broker.data_dir / "buckets", other).create_bucket_snapshot(
            metadata, segments, bucket_key(1, 1), DELAYED, "sub")
        other.put_cursor(DELAYED, "sub", CursorRecord(BEFORE_START, properties={bucket_key(1, 1): bucket_id}))


async def bucket_recovery(_: Call, load: Load) -> None:
    topic = await load(DELAYED, False, writes=True)
    tracker = topic.subscriptions["sub"].delayed_tracker
    assert isinstance(tracker, BucketDelayedDeliveryTracker)
    assert [bucket.number_bucket_delayed_messages for bucket in tracker.immutable_buckets] == [2]


def test_a_topic_recovering_delayed_buckets_makes_no_round_trip_on_the_event_loop(
        zookeeper: ZooKeeperProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert served(zookeeper, tmp_path, monkeypatch, bucket_recovery, stored_bucket,
                  delayedDeliveryTrackerFactoryClassName=BUCKETS) == []
