"""Two ``magnetar broker`` processes over one ZooKeeper and one data directory: the official
client, connected to either broker, reaches each topic's owner through lookups."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from cluster_helpers import CLI, Cluster, initialize, one_topic_per_bundle, start_cluster
from e2e_helpers import EARLIEST, quiet_logger, read_topic, receive_n

from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.testing.zookeeper_process import ZooKeeperProcess


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster") / "data")
    yield running
    running.stop()


def test_each_broker_owns_some_bundles_and_the_client_reaches_them_through_either(cluster: Cluster) -> None:
    a, b = cluster.brokers
    topics = one_topic_per_bundle()
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        for topic in topics:
            client.create_producer(topic).send(topic.encode())
        owners = {topic: cluster.owner_of(topic) for topic in topics}
        # the placement spreads fresh bundles over the least loaded broker
        assert set(owners.values()) == {cluster.broker_id(a), cluster.broker_id(b)}, owners
        on_b = [topic for topic, owner in owners.items() if owner == cluster.broker_id(b)]
    finally:
        client.close()
    # a client of broker A produces and consumes a topic broker B owns
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        topic = on_b[0]
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        got = [m.data() for m in receive_n(consumer, 11)]
        assert got == [topic.encode()] + [f"m{i}".encode() for i in range(10)]
        assert cluster.owner_of(topic) == cluster.broker_id(b)
    finally:
        client.close()


@pytest.fixture(scope="module")
def on_b(cluster: Cluster) -> str:
    """A topic with a message, whose bundle broker B owns."""
    a, b = cluster.brokers
    client = pulsar.Client(b.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        for topic in one_topic_per_bundle():
            client.create_producer(topic).send(b"first")
            if cluster.owner_of(topic) == cluster.broker_id(b):
                return topic
    finally:
        client.close()
    raise AssertionError("broker B owns none of the four bundles")


def test_admin_on_a_topic_another_broker_owns_answers_307_to_its_owner(cluster: Cluster, on_b: str) -> None:
    import httpx
    a, b = cluster.brokers
    path = f"/admin/v2/persistent/public/default/{on_b.rsplit('/', 1)[1]}/stats"
    resp = httpx.get(a.web_url + path + "?getPreciseBacklog=true", timeout=10)
    assert resp.status_code == 307
    assert resp.headers["location"] == b.web_url + path + "?getPreciseBacklog=true"
    followed = httpx.get(a.web_url + path, timeout=10, follow_redirects=True)
    assert followed.status_code == 200, followed.text
    assert followed.json()["msgInCounter"] >= 1
    # the owner serves it itself; partitioned metadata is served by any broker
    assert httpx.get(b.web_url + path, timeout=10).status_code == 200
    assert httpx.get(f"{a.web_url}/admin/v2/persistent/public/default/{on_b.rsplit('/', 1)[1]}/partitions",
                     timeout=10).status_code == 200


def test_lookup_over_http_works_on_every_broker(cluster: Cluster, on_b: str) -> None:
    import httpx
    a, b = cluster.brokers
    path = f"/lookup/v2/topic/persistent/public/default/{on_b.rsplit('/', 1)[1]}"
    for broker in (a, b):
        resp = httpx.get(broker.web_url + path, timeout=10, follow_redirects=True)
        assert resp.status_code == 200, resp.text
        assert resp.json()["brokerUrl"] == b.service_url
        assert resp.json()["httpUrl"] == b.web_url


def test_admin_lists_the_registered_brokers_on_every_broker(cluster: Cluster) -> None:
    import httpx
    expected = sorted(cluster.broker_id(b) for b in cluster.brokers)
    for broker in cluster.brokers:
        resp = httpx.get(f"{broker.web_url}/admin/v2/brokers/test-cluster", timeout=10)
        assert resp.status_code == 200 and resp.json() == expected
        assert httpx.get(f"{broker.web_url}/admin/v2/brokers/nope", timeout=10).status_code == 404


def test_a_broker_registers_with_its_urls(cluster: Cluster) -> None:
    from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
    with ZooKeeperMetadataStore(cluster.url) as store:
        registered = {broker_id: store.get_broker(broker_id) for broker_id in store.list_brokers()}
    assert set(registered) == {cluster.broker_id(b) for b in cluster.brokers}
    for broker in cluster.brokers:
        data = registered[cluster.broker_id(broker)]
        assert data is not None
        assert data["pulsarServiceUrl"] == broker.service_url
        assert data["webServiceUrl"] == broker.web_url


def test_partitioned_topic_metadata_from_either_broker(cluster: Cluster) -> None:
    import httpx
    a, b = cluster.brokers
    topic = f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"
    resp = httpx.put(f"{a.web_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/partitions",
                     json=3, timeout=10)
    assert resp.status_code == 204, resp.text
    client = pulsar.Client(b.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        for i in range(6):
            producer.send(f"p{i}".encode(), partition_key=str(i))
        assert sorted(m.data() for m in receive_n(consumer, 6)) == [f"p{i}".encode() for i in range(6)]
    finally:
        client.close()


def test_initialize_again_keeps_the_records(cluster: Cluster) -> None:
    done = initialize(cluster.url)
    assert done.returncode == 0, done.stderr
    assert "already there, kept" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--metadata-store", "etcd:127.0.0.1:2379"], "not supported"),
    (["--metadata-store", ""], "--metadata-store is empty"),
    (["--metadata-store", "zk:127.0.0.1:notaport"], "--metadata-store"),
    (["--metadata-store", "zk:127.0.0.1:2181", "--web-service-url", "pulsar://x:1"], "is not a webServiceUrl"),
    (["--metadata-store", "zk:127.0.0.1:2181", "--broker-service-url", "http://x:1"], "is not a brokerServiceUrl"),
])
def test_initialize_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    done = subprocess.run([*CLI, "initialize-cluster-metadata", "--cluster", "c", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_initialize_without_cluster_is_refused() -> None:
    done = subprocess.run([*CLI, "initialize-cluster-metadata", "--metadata-store", "zk:127.0.0.1:2181"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--cluster" in done.stderr


def test_broker_without_metadata_store_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "broker", "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "needs metadataStoreUrl" in done.stderr and "Traceback" not in done.stderr


def test_standalone_refuses_a_metadata_store(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "standalone", "--data-dir", str(tmp_path / "d"),
                           "--set", "metadataStoreUrl=zk:127.0.0.1:2181"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "magnetar broker" in done.stderr


def test_commands_on_a_topic_another_broker_owns_get_service_not_ready(cluster: Cluster, on_b: str) -> None:
    from magnetar.testing.raw_client import RawConnection, T, lookup, producer, subscribe
    from magnetar.wire import pulsar_api_pb2 as pb
    a, b = cluster.brokers
    with RawConnection.to_service(a.service_url) as conn:
        conn.handshake()
        conn.send_command(lookup(on_b, 1))
        answer = conn.expect_reply(1, T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert answer.response == pb.CommandLookupTopicResponse.Redirect
        assert answer.brokerServiceUrl == b.service_url and answer.authoritative
        conn.send_command(producer(on_b, 0, 2))
        error = conn.expect_reply(2, T.ERROR).command.error
        assert error.error == pb.ServiceNotReady and "redo the lookup" in error.message
        conn.send_command(subscribe(on_b, "s", 0, 3))
        assert conn.expect_reply(3, T.ERROR).command.error.error == pb.ServiceNotReady
    with RawConnection.to_service(b.service_url) as conn:
        conn.handshake()
        conn.send_command(lookup(on_b, 1))
        answer = conn.expect_reply(1, T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert answer.response == pb.CommandLookupTopicResponse.Connect
        assert conn.create_producer(on_b, 0, 2).producer_name


def test_magnetar_admin_follows_the_redirect_to_the_owner(cluster: Cluster, on_b: str) -> None:
    a, _ = cluster.brokers
    done = subprocess.run([*CLI, "admin", "--admin-url", a.web_url, "--json", "topics", "stats", on_b],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"msgInCounter"' in done.stdout


def test_broker_of_a_cluster_never_initialised_is_refused(zookeeper: ZooKeeperProcess, tmp_path: Path) -> None:
    url = zookeeper.url(f"/never-initialised-{uuid.uuid4().hex[:8]}")
    done = subprocess.run([*CLI, "broker", "--data-dir", str(tmp_path / "d"), "--set", f"metadataStoreUrl={url}",
                           "--set", "clusterName=nowhere", "--set", "brokerServicePort=0", "--set", "webServicePort=0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "run magnetar initialize-cluster-metadata --cluster nowhere" in done.stderr
    assert "Traceback" not in done.stderr


def test_broker_with_an_unreachable_metadata_store_is_a_clear_error(tmp_path: Path) -> None:
    from magnetar.testing.broker_process import free_port
    done = subprocess.run([*CLI, "broker", "--data-dir", str(tmp_path / "d"),
                           "--set", f"metadataStoreUrl=zk:127.0.0.1:{free_port()}",
                           "--set", "metadataStoreOperationTimeoutSeconds=2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr


def test_owned_namespaces_of_each_broker(cluster: Cluster, on_b: str) -> None:
    import httpx

    from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
    with ZooKeeperMetadataStore(cluster.url) as store:
        owners = {f"public/default/{bundle_range}": str(node.data["brokerId"])
                  for bundle_range, node in store.list_owned_bundles("public/default").items()}
    a, b = cluster.brokers
    for broker in (a, b):
        me = cluster.broker_id(broker)
        resp = httpx.get(f"{broker.web_url}/admin/v2/brokers/test-cluster/{me}/ownedNamespaces", timeout=10)
        assert resp.status_code == 200, resp.text
        assert sorted(resp.json()) == sorted(bundle for bundle, owner in owners.items() if owner == me)
        assert all(status["is_active"] for status in resp.json().values())
    assert any(owner == cluster.broker_id(b) for owner in owners.values())
    path = f"/admin/v2/brokers/test-cluster/{cluster.broker_id(b)}/ownedNamespaces"
    resp = httpx.get(a.web_url + path, timeout=10)
    assert resp.status_code == 307 and resp.headers["location"] == b.web_url + path
    assert httpx.get(f"{a.web_url}/admin/v2/brokers/test-cluster/nobody:1/ownedNamespaces",
                     timeout=10).status_code == 404
    assert httpx.get(f"{a.web_url}/admin/v2/brokers/nope/{cluster.broker_id(a)}/ownedNamespaces",
                     timeout=10).status_code == 404


def test_unloading_a_bundle_gives_it_up_and_the_next_lookup_places_it(cluster: Cluster) -> None:
    import httpx
    a, b = cluster.brokers
    namespace = f"public/unload-{uuid.uuid4().hex[:6]}"
    assert httpx.put(f"{a.web_url}/admin/v2/namespaces/{namespace}", json={}, timeout=10).status_code == 204
    topic = f"persistent://{namespace}/t"
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        producer = client.create_producer(topic)
        producer.send(b"before")
        owner = cluster.by_id(cluster.owner_of(topic) or "")
        other = b if owner is a else a
        bundle = NamespaceBundles(namespace).find_bundle(topic).range_name
        path = f"/admin/v2/namespaces/{namespace}/{bundle}/unload"
        resp = httpx.put(other.web_url + path, timeout=10)
        assert resp.status_code == 307 and resp.headers["location"] == owner.web_url + path
        assert httpx.put(owner.web_url + path, timeout=10).status_code == 204
        # the producer is closed by its broker, looks the topic up again and carries on
        producer.send(b"after")
        assert cluster.owner_of(topic) is not None
        assert read_topic(client, topic) == [b"before", b"after"]
        bad = httpx.put(f"{a.web_url}/admin/v2/namespaces/{namespace}/0x1_nope/unload", timeout=10)
        assert bad.status_code == 412 and "Invalid bundle range" in bad.text
    finally:
        client.close()


def test_unloading_a_namespace_gives_up_its_bundles_on_every_broker(cluster: Cluster) -> None:
    import httpx

    from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore
    a, _ = cluster.brokers
    namespace = f"public/unload-all-{uuid.uuid4().hex[:6]}"
    assert httpx.put(f"{a.web_url}/admin/v2/namespaces/{namespace}", json={}, timeout=10).status_code == 204
    bundles = NamespaceBundles(namespace)
    topics: dict[str, str] = {}
    i = 0
    while len(topics) < len(bundles):
        topic = f"persistent://{namespace}/t{i}"
        topics.setdefault(bundles.find_bundle(topic).range_name, topic)
        i += 1
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        for topic in topics.values():
            client.create_producer(topic).send(b"x")
    finally:
        client.close()
    first_owner = cluster.owner_of(next(iter(topics.values())))
    assert first_owner is not None
    # asked of a broker that does not own the first bundle: that one is unloaded at its owner
    asked = next(b for b in cluster.brokers if cluster.broker_id(b) != first_owner)
    assert httpx.put(f"{asked.web_url}/admin/v2/namespaces/{namespace}/unload", timeout=30).status_code == 204
    with ZooKeeperMetadataStore(cluster.url) as store:
        assert store.list_owned_bundles(namespace) == {}


def test_an_unloaded_bundle_sends_its_clients_straight_to_the_next_owner(cluster: Cluster) -> None:
    """PIP-307's transfer: the closes carry the successor's address, and the successor serves
    a producer that comes to it directly, with no lookup, once the bundle is released."""
    import httpx

    from magnetar.testing.raw_client import RawConnection
    from magnetar.wire import pulsar_api_pb2 as pb
    T = pb.BaseCommand
    a, b = cluster.brokers
    namespace = f"public/handover-{uuid.uuid4().hex[:6]}"
    assert httpx.put(f"{a.web_url}/admin/v2/namespaces/{namespace}", json={}, timeout=10).status_code == 204
    topic = f"persistent://{namespace}/t"
    client = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        client.create_producer(topic).close()  # the lookup places the bundle
    finally:
        client.close()
    owner = cluster.by_id(cluster.owner_of(topic) or "")
    successor = b if owner is a else a
    bundle = NamespaceBundles(namespace).find_bundle(topic).range_name
    with RawConnection.to_service(owner.service_url) as conn, \
            RawConnection.to_service(successor.service_url) as next_conn:
        conn.handshake()
        next_conn.handshake()
        conn.create_producer(topic, producer_id=7, request_id=1)
        conn.subscribe(topic, "s", consumer_id=3, request_id=2)
        unloading = threading.Thread(target=httpx.put, daemon=True, kwargs={
            "url": f"{owner.web_url}/admin/v2/namespaces/{namespace}/{bundle}/unload", "timeout": 10})
        unloading.start()
        closed = conn.expect(T.CLOSE_PRODUCER).command.close_producer
        assert closed.assignedBrokerServiceUrl == successor.service_url
        # straight there, as the client does, while the owner is still releasing the bundle
        next_conn.create_producer(topic, producer_id=7, request_id=1)
        closed_consumer = conn.expect(T.CLOSE_CONSUMER).command.close_consumer
        assert closed_consumer.assignedBrokerServiceUrl == successor.service_url
        unloading.join(10)
    assert cluster.owner_of(topic) == cluster.broker_id(successor)


def test_a_policy_written_through_another_broker_applies_on_the_owner_within_a_second(cluster: Cluster) -> None:
    """The write goes through the non-owner's admin API (its store calls off its event loop);
    the owner learns it through its ZooKeeper watch and refuses a producer past the limit."""
    import httpx
    a, b = cluster.brokers
    namespace = f"public/policy-{uuid.uuid4().hex[:6]}"
    created = httpx.put(f"{a.web_url}/admin/v2/namespaces/{namespace}", json={}, timeout=10)
    assert created.status_code == 204
    opened = pulsar.Client(a.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    with contextlib.closing(opened) as client:
        topic = f"persistent://{namespace}/t"
        client.create_producer(topic)  # the lookup places the bundle; this producer stays
        owner = cluster.by_id(cluster.owner_of(topic) or "")
        other = b if owner is a else a
        limit = f"{other.web_url}/admin/v2/namespaces/{namespace}/maxProducersPerTopic"
        assert httpx.post(limit, json=1, timeout=10).status_code == 204
        written = time.monotonic()
        refused_after = None
        while refused_after is None and time.monotonic() - written < 10:
            try:
                client.create_producer(topic).close()
            except pulsar.PulsarException:
                refused_after = time.monotonic() - written
        assert refused_after is not None, "the owner never applied maxProducersPerTopic"
        assert refused_after <= 1.0, f"the owner applied the policy {refused_after:.2f} s after it was written"
        assert httpx.get(limit.replace(other.web_url, owner.web_url), timeout=10).json() == 1
