"""The load manager's REST routes and ``magnetar admin`` verbs on a standalone broker: the
leader, bundle splits and their bad input (the cluster's side is in
test_cluster_load_balancing.py)."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pulsar
import pytest
from test_cli import magnetar, ok

from magnetar.core.cluster.namespace_bundles import NamespaceBundles
from magnetar.testing.broker_process import BrokerProcess

FIRST = "0x00000000_0x40000000"


def make_namespace(admin: httpx.Client, policies: dict[str, object] | None = None) -> str:
    tenant = f"lb-{uuid.uuid4().hex[:8]}"
    r = admin.put(f"/admin/v2/tenants/{tenant}", json={"adminRoles": [], "allowedClusters": ["standalone"]})
    assert r.status_code == 204, r.text
    assert admin.put(f"/admin/v2/namespaces/{tenant}/ns", json=policies).status_code == 204
    return f"{tenant}/ns"


def test_a_standalone_broker_leads_itself(admin: httpx.Client) -> None:
    leader = admin.get("/admin/v2/brokers/leaderBroker").json()
    assert set(leader) == {"brokerId", "serviceUrl"}
    assert leader["serviceUrl"] == f"http://{leader['brokerId']}"


def test_split_in_halves_and_topics_are_served_after(admin: httpx.Client, client: pulsar.Client) -> None:
    namespace = make_namespace(admin)
    topic = next(f"persistent://{namespace}/t{i}" for i in range(100)
                 if NamespaceBundles(namespace).find_bundle(f"persistent://{namespace}/t{i}").range_name == FIRST)
    producer = client.create_producer(topic)
    producer.send(b"before")
    r = admin.put(f"/admin/v2/namespaces/{namespace}/{FIRST}/split", params={"unload": "true"})
    assert r.status_code == 204, r.text
    assert admin.get(f"/admin/v2/namespaces/{namespace}/bundles").json() == {
        "boundaries": ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 5}
    assert admin.get(f"/admin/v2/namespaces/{namespace}").json()["bundles"]["numBundles"] == 5
    producer.send(b"after")  # the producer reconnects to the unloaded topic
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"before", b"after"]
    # the halves are bundles now: the old range is not, and each half unloads and splits again
    assert admin.put(f"/admin/v2/namespaces/{namespace}/{FIRST}/unload").status_code == 412
    assert admin.put(f"/admin/v2/namespaces/{namespace}/0x00000000_0x20000000/unload").status_code == 204
    assert admin.put(f"/admin/v2/namespaces/{namespace}/0x20000000_0x40000000/split").status_code == 204
    assert admin.get(f"/admin/v2/namespaces/{namespace}/bundles").json()["numBundles"] == 6


def test_topic_count_equally_divide_splits_between_the_middle_topics(admin: httpx.Client) -> None:
    namespace = make_namespace(admin, {"bundles": {"numBundles": 1}})
    names = [f"persistent://{namespace}/t{i}" for i in range(6)]
    for name in names:
        assert admin.put(f"/admin/v2/persistent/{name.removeprefix('persistent://')}").status_code == 204
    whole = "0x00000000_0xffffffff"
    r = admin.put(f"/admin/v2/namespaces/{namespace}/{whole}/split",
                  params={"splitAlgorithmName": "topic_count_equally_divide"})
    assert r.status_code == 204, r.text
    boundaries = admin.get(f"/admin/v2/namespaces/{namespace}/bundles").json()["boundaries"]
    assert len(boundaries) == 3
    halves = NamespaceBundles(namespace, [int(b, 16) for b in boundaries])
    assert sorted(sum(1 for n in names if halves.find_bundle(n) == b) for b in halves.bundles) == [3, 3]


@pytest.mark.parametrize(("bundle", "params", "status", "says"), [
    (FIRST, {"splitAlgorithmName": "specified_positions_divide"}, 412, "Unsupported namespace bundle split"),
    (FIRST, {"splitAlgorithmName": "nope"}, 412, "Unsupported namespace bundle split"),
    (FIRST, {"splitAlgorithmName": "topic_count_equally_divide"}, 412, "needs two"),
    ("0x00000000_0x20000000", {}, 412, "is not a bundle of"),
    ("0x00000000", {}, 412, "Invalid bundle range"),
    ("nope", {}, 412, "Invalid bundle range"),
    ("0x40000000_0x00000000", {}, 412, "Invalid bundle range"),
    (FIRST, {"unload": "sometimes"}, 400, "unload"),
])
def test_split_bad_input(admin: httpx.Client, bundle: str, params: dict[str, str], status: int, says: str) -> None:
    namespace = make_namespace(admin)
    r = admin.put(f"/admin/v2/namespaces/{namespace}/{bundle}/split", params=params)
    assert r.status_code == status, r.text
    assert says in r.json()["reason"]
    assert admin.get(f"/admin/v2/namespaces/{namespace}/bundles").json()["numBundles"] == 4  # nothing changed


def test_split_of_a_missing_namespace_or_a_bundle_too_small(admin: httpx.Client) -> None:
    assert admin.put(f"/admin/v2/namespaces/public/nowhere-{uuid.uuid4().hex[:6]}/{FIRST}/split").status_code == 404
    namespace = make_namespace(admin, {"bundles": {"boundaries": ["0x00000000", "0x00000001", "0xffffffff"],
                                                   "numBundles": 2}})
    r = admin.put(f"/admin/v2/namespaces/{namespace}/0x00000000_0x00000001/split")
    assert r.status_code == 412 and "cannot be split further" in r.json()["reason"]


def test_load_balancing_verbs_and_their_bad_input(broker: BrokerProcess, admin: httpx.Client) -> None:
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    namespace = f"{tenant}/ns"
    assert admin.put(f"/admin/v2/tenants/{tenant}", json={"allowedClusters": ["standalone"]}).status_code == 204
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    broker_id = admin.get("/admin/v2/brokers/leaderBroker").json()["brokerId"]
    split = ("namespaces", "split-bundle", namespace, "-b", "0x00000000_0x40000000", "--unload")
    calls = [("--json", "brokers", "leader"), ("--json", "brokers", "load"),
             ("brokers", "owned-bundles", "standalone", broker_id), split,
             ("namespaces", "split-bundle", namespace, "-b", "nope"),
             ("namespaces", "split-bundle", namespace, "-b", "0x00000000_0x20000000", "-san", "sideways"),
             ("namespaces", "split-bundle", "no-slash", "-b", "0x00000000_0x20000000"),
             ("namespaces", "split-bundle", namespace)]
    with ThreadPoolExecutor(len(calls)) as pool:
        leader, load, owned, done, *bad = pool.map(lambda args: magnetar(broker, "admin", *args), calls)
    assert json.loads(ok(leader))["brokerId"] == broker_id
    assert "msgRateIn" in json.loads(ok(load))
    assert "public/default/0x00000000_0x40000000" in ok(owned)
    assert "Split bundle 0x00000000_0x40000000" in ok(done)
    expected = [(1, "expected 0x<lower>_0x<upper>"), (1, "invalid --split-algorithm-name"),
                (1, "invalid namespace"), (2, "--bundle")]
    for (code, says), result in zip(expected, bad, strict=True):
        assert result.returncode == code and says in result.stderr, result.stderr
    # the broker's refusal of a range that is no bundle (split already), and the bundles after
    again = magnetar(broker, "admin", *split)
    assert again.returncode == 1 and "is not a bundle of" in again.stderr
    bundles = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "bundles", namespace)))
    assert bundles["numBundles"] == 5 and "0x20000000" in bundles["boundaries"]
