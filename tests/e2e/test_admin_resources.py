"""Admin REST: clusters, tenants, namespaces and namespace policies over HTTP."""

from __future__ import annotations

import uuid

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger

from magnetar.testing.broker_process import BrokerProcess


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_tenant(admin: httpx.Client) -> str:
    tenant = new_name("tenant")
    r = admin.put(f"/admin/v2/tenants/{tenant}", json={"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    assert r.status_code == 204, r.text
    return tenant


def make_namespace(admin: httpx.Client, policies: dict[str, object] | None = None) -> str:
    namespace = f"{make_tenant(admin)}/ns"
    r = admin.put(f"/admin/v2/namespaces/{namespace}", json=policies)
    assert r.status_code == 204, r.text
    return namespace


def reason(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"reason"}, body
    return str(body["reason"])


# -- brokers ------------------------------------------------------------------------------
def test_health_ready_and_runtime_configuration(admin: httpx.Client, broker: BrokerProcess) -> None:
    assert admin.get("/admin/v2/brokers/health").text == "ok"
    assert admin.get("/admin/v2/brokers/ready").text == "ok"
    config = admin.get("/admin/v2/brokers/configuration/runtime").json()
    assert config["brokerServicePort"] == str(broker.port)
    assert config["exposeTopicLevelMetricsInPrometheus"] == "true"
    assert admin.get("/admin/v2/brokers/configuration").json() == []
    assert admin.get("/admin/v2/brokers/standalone").json() == [f"127.0.0.1:{broker.web_port}"]
    assert admin.get("/admin/v2/brokers/nope").status_code == 404


def test_a_standalone_broker_owns_every_bundle(admin: httpx.Client, broker: BrokerProcess) -> None:
    owned = admin.get(f"/admin/v2/brokers/standalone/127.0.0.1:{broker.web_port}/ownedNamespaces").json()
    assert "public/default/0x00000000_0x40000000" in owned and "public/default/0xc0000000_0xffffffff" in owned
    assert owned["public/default/0x00000000_0x40000000"] == {"broker_assignment": "shared", "is_controlled": False,
                                                             "is_active": True}
    assert admin.get("/admin/v2/brokers/standalone/other:1/ownedNamespaces").status_code == 404


def test_namespace_bundles(admin: httpx.Client) -> None:
    assert admin.get("/admin/v2/namespaces/public/default/bundles").json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4}
    assert admin.get("/admin/v2/namespaces/public/nowhere/bundles").status_code == 404


def test_unload_a_bundle_of_a_standalone_broker(admin: httpx.Client) -> None:
    assert admin.put("/admin/v2/namespaces/public/default/0x00000000_0x40000000/unload").status_code == 204
    for bad in ("0x00000000_0xffffffff", "0x00000000", "nope"):
        resp = admin.put(f"/admin/v2/namespaces/public/default/{bad}/unload")
        assert resp.status_code == 412, (bad, resp.text)
    assert admin.put("/admin/v2/namespaces/public/nowhere/0x00000000_0x40000000/unload").status_code == 404


# -- clusters ------------------------------------------------------------------------------
def test_cluster_lifecycle(admin: httpx.Client) -> None:
    assert "standalone" in admin.get("/admin/v2/clusters").json()
    assert admin.get("/admin/v2/clusters/standalone").json()["brokerServiceUrl"].startswith("pulsar://")
    name = new_name("c")
    assert admin.put(f"/admin/v2/clusters/{name}", json={"serviceUrl": "http://x:8080"}).status_code == 204
    r = admin.put(f"/admin/v2/clusters/{name}", json={"serviceUrl": "http://x:8080"})
    assert r.status_code == 409 and reason(r) == "Cluster already exists"
    assert admin.post(f"/admin/v2/clusters/{name}", json={"serviceUrl": "http://y:8080"}).status_code == 204
    assert admin.get(f"/admin/v2/clusters/{name}").json() == {"serviceUrl": "http://y:8080"}
    assert admin.delete(f"/admin/v2/clusters/{name}").status_code == 204
    assert admin.get(f"/admin/v2/clusters/{name}").status_code == 404
    assert admin.post(f"/admin/v2/clusters/{name}", json={}).status_code == 404
    assert admin.delete("/admin/v2/clusters/standalone").status_code == 412
    assert admin.put("/admin/v2/clusters/bad%20name", json={}).status_code == 412


# -- tenants ------------------------------------------------------------------------------------
def test_tenant_lifecycle(admin: httpx.Client) -> None:
    tenant = make_tenant(admin)
    assert tenant in admin.get("/admin/v2/tenants").json()
    assert admin.get(f"/admin/v2/tenants/{tenant}").json() == {"adminRoles": ["ops"],
                                                                "allowedClusters": ["standalone"]}
    r = admin.put(f"/admin/v2/tenants/{tenant}", json={"adminRoles": [], "allowedClusters": []})
    assert r.status_code == 409 and reason(r) == "Tenant already exists"
    assert admin.post(f"/admin/v2/tenants/{tenant}", json={"adminRoles": ["a"],
                                                           "allowedClusters": ["standalone"]}).status_code == 204
    assert admin.get(f"/admin/v2/tenants/{tenant}").json()["adminRoles"] == ["a"]
    assert admin.put(f"/admin/v2/namespaces/{tenant}/ns").status_code == 204
    r = admin.delete(f"/admin/v2/tenants/{tenant}")
    assert r.status_code == 409 and reason(r) == "The tenant still has active namespaces"
    assert admin.delete(f"/admin/v2/tenants/{tenant}", params={"force": "true"}).status_code == 204
    assert admin.get(f"/admin/v2/tenants/{tenant}").status_code == 404
    assert admin.get(f"/admin/v2/namespaces/{tenant}/ns").status_code == 404


def test_tenant_bad_input(admin: httpx.Client) -> None:
    r = admin.get("/admin/v2/tenants/no-such-tenant")
    assert r.status_code == 404 and reason(r) == "Tenant does not exist"
    r = admin.put("/admin/v2/tenants/x", json={"adminRoles": [], "allowedClusters": ["no-such-cluster"]})
    assert r.status_code == 412 and "no-such-cluster" in reason(r)
    r = admin.put("/admin/v2/tenants/bad*name", json={"adminRoles": [], "allowedClusters": []})
    assert r.status_code == 412 and "name is not valid" in reason(r)
    assert admin.put("/admin/v2/tenants/x2", json={"adminRoles": "notalist"}).status_code == 400
    assert admin.put("/admin/v2/tenants/x3", json={"unknownField": 1}).status_code == 400
    r = admin.put("/admin/v2/tenants/x4", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in reason(r)
    assert admin.delete("/admin/v2/tenants/no-such-tenant").status_code == 404


# -- namespaces ---------------------------------------------------------------------------------
def test_namespace_lifecycle(admin: httpx.Client) -> None:
    tenant = make_tenant(admin)
    assert admin.get(f"/admin/v2/namespaces/{tenant}").json() == []
    body = {"deduplicationEnabled": True, "message_ttl_in_seconds": 60, "bundles": {"numBundles": 4}}
    assert admin.put(f"/admin/v2/namespaces/{tenant}/a", json=body).status_code == 204
    assert admin.get(f"/admin/v2/namespaces/{tenant}").json() == [f"{tenant}/a"]
    policies = admin.get(f"/admin/v2/namespaces/{tenant}/a").json()
    assert policies["deduplicationEnabled"] is True
    assert policies["message_ttl_in_seconds"] == 60
    assert policies["bundles"] == {"numBundles": 4}
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["subscription_auth_mode"] == "None"
    r = admin.put(f"/admin/v2/namespaces/{tenant}/a")
    assert r.status_code == 409 and reason(r) == "Namespace already exists"
    assert admin.put(f"/admin/v2/persistent/{tenant}/a/t").status_code == 204
    assert admin.get(f"/admin/v2/namespaces/{tenant}/a/topics").json() == [f"persistent://{tenant}/a/t"]
    r = admin.delete(f"/admin/v2/namespaces/{tenant}/a")
    assert r.status_code == 409 and reason(r) == "Cannot delete non empty namespace"
    assert admin.delete(f"/admin/v2/namespaces/{tenant}/a", params={"force": "true"}).status_code == 204
    assert admin.get(f"/admin/v2/namespaces/{tenant}").json() == []
    assert admin.put(f"/admin/v2/namespaces/{tenant}/b").status_code == 204
    assert admin.delete(f"/admin/v2/namespaces/{tenant}/b").status_code == 204


def test_namespace_bad_input(admin: httpx.Client) -> None:
    r = admin.put("/admin/v2/namespaces/no-such-tenant/ns")
    assert r.status_code == 404 and reason(r) == "Tenant does not exist"
    tenant = make_tenant(admin)
    r = admin.get(f"/admin/v2/namespaces/{tenant}/missing")
    assert r.status_code == 404 and reason(r) == "Namespace does not exist"
    assert admin.put(f"/admin/v2/namespaces/{tenant}/bad$name").status_code == 412
    assert admin.put(f"/admin/v2/namespaces/{tenant}/n1", json={"message_ttl_in_seconds": "soon"}).status_code == 400
    assert admin.put(f"/admin/v2/namespaces/{tenant}/n2", json=[1, 2]).status_code == 400
    assert admin.put(f"/admin/v2/namespaces/{tenant}/n3",
                     json={"subscription_types_enabled": ["Bogus"]}).status_code == 400
    r = admin.put(f"/admin/v2/namespaces/{tenant}/n4", content=b"[", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert admin.get(f"/admin/v2/namespaces/{tenant}").json() == []


# -- policies -----------------------------------------------------------------------------------
POLICIES = [
    ("deduplication", "deduplicationEnabled", True, "yes"),
    ("retention", "retention_policies", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
     {"retentionTimeInMinutes": "1h"}),
    ("messageTTL", "message_ttl_in_seconds", 120, -1),
    ("delayedDelivery", "delayed_delivery_policies", {"tickTime": 500, "active": True,
                                                      "maxDeliveryDelayInMillis": 0}, {"tickTime": 0}),
    ("maxProducersPerTopic", "max_producers_per_topic", 3, 1.5),
    ("maxConsumersPerSubscription", "max_consumers_per_subscription", 2, "2"),
    ("maxConsumersPerTopic", "max_consumers_per_topic", 5, -1),
    ("maxSubscriptionsPerTopic", "max_subscriptions_per_topic", 10, "ten"),
    ("maxTopicsPerNamespace", "max_topics_per_namespace", 100, 2.5),
    ("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer", 1000, None),
    ("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription", 5000, [1]),
    ("autoTopicCreation", "autoTopicCreationOverride",
     {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
     {"allowAutoTopicCreation": True, "topicType": "partitioned"}),
    ("subscriptionTypesEnabled", "subscription_types_enabled", ["Exclusive", "Shared"], ["Everything"]),
]


@pytest.mark.parametrize(("path", "field", "good", "bad"), POLICIES, ids=[p[0] for p in POLICIES])
def test_policy_endpoints(admin: httpx.Client, path: str, field: str, good: object, bad: object) -> None:
    namespace = make_namespace(admin)
    url = f"/admin/v2/namespaces/{namespace}/{path}"
    assert admin.get(url).json() is None
    assert admin.post(url, json=good).status_code == 204
    assert admin.get(url).json() == good
    assert admin.get(f"/admin/v2/namespaces/{namespace}").json()[field] == good
    r = admin.post(url, json=bad)
    # a body of the wrong type is 400; a negative number where Pulsar wants 0 or more, Pulsar's 412
    negative = isinstance(bad, int) and not isinstance(bad, bool) and bad < 0
    assert r.status_code == (412 if negative else 400), r.text
    reason(r)
    assert admin.get(url).json() == good
    assert admin.delete(url).status_code == 204
    assert admin.get(url).json() is None
    assert field not in admin.get(f"/admin/v2/namespaces/{namespace}").json() or field == "subscription_types_enabled"
    assert admin.post(f"/admin/v2/namespaces/{namespace}x/{path}", json=good).status_code == 404


def test_backlog_quota(admin: httpx.Client) -> None:
    namespace = make_namespace(admin)
    base = f"/admin/v2/namespaces/{namespace}"
    assert admin.get(f"{base}/backlogQuotaMap").json() == {}
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert admin.post(f"{base}/backlogQuota", json=quota).status_code == 204
    assert admin.post(f"{base}/backlogQuota", params={"backlogQuotaType": "message_age"},
                      json={"limitTime": 60, "policy": "consumer_backlog_eviction"}).status_code == 204
    quotas = admin.get(f"{base}/backlogQuotaMap").json()
    assert quotas["destination_storage"] == quota
    assert quotas["message_age"]["limitTime"] == 60
    assert admin.post(f"{base}/backlogQuota", json={"policy": "drop_everything"}).status_code == 400
    assert admin.post(f"{base}/backlogQuota", params={"backlogQuotaType": "x"}, json=quota).status_code == 400
    assert admin.delete(f"{base}/backlogQuota", params={"backlogQuotaType": "message_age"}).status_code == 204
    assert list(admin.get(f"{base}/backlogQuotaMap").json()) == ["destination_storage"]


def test_policies_take_effect(admin: httpx.Client, broker: BrokerProcess) -> None:
    namespace = make_namespace(admin)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        admin.post(f"/admin/v2/namespaces/{namespace}/maxProducersPerTopic", json=1)
        topic = f"persistent://{namespace}/limited"
        client.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
        admin.post(f"/admin/v2/namespaces/{namespace}/subscriptionTypesEnabled", json=["Shared"])
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
        client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        admin.post(f"/admin/v2/namespaces/{namespace}/autoTopicCreation",
                   json={"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2})
        client.create_producer(f"persistent://{namespace}/auto")
        assert admin.get(f"/admin/v2/persistent/{namespace}/auto/partitions").json()["partitions"] == 2
        admin.post(f"/admin/v2/namespaces/{namespace}/autoTopicCreation", json={"allowAutoTopicCreation": False})
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"persistent://{namespace}/never-created")
    finally:
        client.close()
