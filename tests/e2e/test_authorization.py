"""Authorization end to end: super users, tenant admins, and permissions granted through
Pulsar's REST paths, enforced on the binary protocol and the admin API."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger
from security_helpers import SECRET_DATA_URL, TOKEN_PROVIDER, token

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection
from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("authz") / "data"
    proc = BrokerProcess(data, {"authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
                                "tokenSecretKey": SECRET_DATA_URL, "authorizationEnabled": "true",
                                "superUserRoles": "admin", "authenticateMetricsEndpoint": "true"}).start()
    yield proc
    proc.kill()


def http(broker: BrokerProcess, role: str) -> httpx.Client:
    return httpx.Client(base_url=broker.web_url, timeout=10, headers={"Authorization": f"Bearer {token(role)}"})


@pytest.fixture
def namespace(broker: BrokerProcess) -> str:
    """A fresh tenant administered by ``acme-admin``, with namespace ``app``."""
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    with http(broker, "admin") as admin:
        assert admin.put(f"/admin/v2/tenants/{tenant}",
                         json={"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}).status_code == 204
    with http(broker, "acme-admin") as tenant_admin:
        assert tenant_admin.put(f"/admin/v2/namespaces/{tenant}/app").status_code == 204
    return f"{tenant}/app"


def client(broker: BrokerProcess, role: str) -> pulsar.Client:
    return pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(token(role)),
                         operation_timeout_seconds=5, logger=quiet_logger())


def can_produce(broker: BrokerProcess, role: str, topic: str) -> bool:
    c = client(broker, role)
    try:
        c.create_producer(topic).send(b"x")
        return True
    except pulsar.PulsarException:
        return False
    finally:
        c.close()


def can_consume(broker: BrokerProcess, role: str, topic: str, subscription: str = "s") -> bool:
    c = client(broker, role)
    try:
        c.subscribe(topic, subscription)
        return True
    except pulsar.PulsarException:
        return False
    finally:
        c.close()


def test_namespace_permissions_grant_and_revoke(broker: BrokerProcess, namespace: str) -> None:
    topic = f"persistent://{namespace}/orders"
    assert not can_produce(broker, "writer", topic)
    with http(broker, "acme-admin") as tenant_admin:
        base = f"/admin/v2/namespaces/{namespace}/permissions"
        assert tenant_admin.post(f"{base}/writer", json=["produce"]).status_code == 204
        assert tenant_admin.post(f"{base}/reader", json=["consume"]).status_code == 204
        assert tenant_admin.get(base).json() == {"writer": ["produce"], "reader": ["consume"]}
        assert can_produce(broker, "writer", topic)
        assert not can_consume(broker, "writer", topic)
        assert can_consume(broker, "reader", topic)
        assert not can_produce(broker, "reader", topic)
        assert tenant_admin.delete(f"{base}/writer").status_code == 204
        assert tenant_admin.get(base).json() == {"reader": ["consume"]}
    assert not can_produce(broker, "writer", topic)
    with http(broker, "admin") as admin:
        policies = admin.get(f"/admin/v2/namespaces/{namespace}").json()
    assert policies["auth_policies"]["namespace_auth"] == {"reader": ["consume"]}


def test_topic_permissions(broker: BrokerProcess, namespace: str) -> None:
    topic, other = f"persistent://{namespace}/mine", f"persistent://{namespace}/theirs"
    tenant, ns = namespace.split("/")
    with http(broker, "acme-admin") as tenant_admin:
        base = f"/admin/v2/persistent/{tenant}/{ns}/mine/permissions"
        assert tenant_admin.post(f"{base}/app", json=["produce", "consume"]).status_code == 204
        assert tenant_admin.post(f"/admin/v2/namespaces/{namespace}/permissions/ops",
                                 json=["consume"]).status_code == 204
        assert tenant_admin.get(base).json() == {"app": ["consume", "produce"], "ops": ["consume"]}
        assert tenant_admin.post(f"{base}/app", json=["fly"]).status_code == 400
    assert can_produce(broker, "app", topic) and can_consume(broker, "app", topic)
    assert not can_produce(broker, "app", other)
    with http(broker, "app") as app:
        assert app.get(f"/admin/v2/persistent/{tenant}/{ns}/mine/stats").status_code == 200
        assert app.get(f"/admin/v2/persistent/{tenant}/{ns}/theirs/stats").status_code == 401
        assert app.put(f"/admin/v2/persistent/{tenant}/{ns}/mine/unload").status_code == 401
        assert app.get(f"/admin/v2/persistent/{tenant}/{ns}/mine/permissions").status_code == 401


def test_binary_errors_are_pulsars(broker: BrokerProcess, namespace: str) -> None:
    topic = f"persistent://{namespace}/raw"
    with RawConnection.to_service(broker.service_url) as raw:
        raw.send_command(pb.BaseCommand(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="raw", protocol_version=21, auth_method_name="token",
            auth_data=token("nobody").encode())))
        raw.expect(T.CONNECTED)
        raw.send_command(pb.BaseCommand(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=1)))
        lookup = raw.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert (lookup.error, lookup.message) == (pb.AuthorizationError, "Client is not authorized to Lookup")
        metadata_request = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=2)
        raw.send_command(pb.BaseCommand(type=T.PARTITIONED_METADATA, partitionMetadata=metadata_request))
        meta = raw.expect(T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        assert meta.error == pb.AuthorizationError
        raw.send_command(pb.BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=1, request_id=3)))
        error = raw.expect(T.ERROR).command.error
        assert (error.error, error.message) == (pb.AuthorizationError, "Client is not authorized to Produce")
        raw.send_command(pb.BaseCommand(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
            topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=4)))
        error = raw.expect(T.ERROR).command.error
        assert (error.error, error.message) == (pb.AuthorizationError, "Client is not authorized to subscribe")


def test_admin_api_roles(broker: BrokerProcess, namespace: str) -> None:
    tenant = namespace.split("/")[0]
    with http(broker, "acme-admin") as tenant_admin, http(broker, "someone") as someone, \
            http(broker, "admin") as admin:
        assert tenant_admin.get(f"/admin/v2/tenants/{tenant}").status_code == 200
        assert tenant_admin.get("/admin/v2/namespaces/public").status_code == 403
        assert tenant_admin.get("/admin/v2/tenants").status_code == 401
        assert tenant_admin.put(f"/admin/v2/tenants/{tenant}-2", json={}).status_code == 401
        assert someone.put(f"/admin/v2/namespaces/{tenant}/other").status_code == 403
        assert someone.post(f"/admin/v2/namespaces/{namespace}/permissions/someone",
                            json=["produce"]).status_code == 403
        assert someone.get("/admin/v2/clusters").status_code == 200
        assert someone.get("/admin/v2/brokers/health").status_code == 401
        assert admin.get("/admin/v2/brokers/health").status_code == 200
        assert admin.get(f"/admin/v2/namespaces/{namespace}/permissions").status_code == 200
    assert httpx.get(f"{broker.web_url}/admin/v2/brokers/ready").status_code == 200


def test_metrics_need_a_super_user_when_authenticate_metrics_endpoint_is_on(broker: BrokerProcess) -> None:
    assert httpx.get(f"{broker.web_url}/metrics").status_code == 401
    with http(broker, "someone") as someone:
        assert someone.get("/metrics").status_code == 401
    with http(broker, "admin") as admin:
        scrape = admin.get("/metrics")
    assert scrape.status_code == 200 and "pulsar_topics_count" in scrape.text


def test_subscription_permissions_and_prefix_mode(broker: BrokerProcess, namespace: str) -> None:
    topic = f"persistent://{namespace}/subs"
    base = f"/admin/v2/namespaces/{namespace}"
    with http(broker, "acme-admin") as tenant_admin:
        assert tenant_admin.post(f"{base}/permissions/reader", json=["consume"]).status_code == 204
        assert tenant_admin.post(f"{base}/permissions/other", json=["consume"]).status_code == 204
        assert tenant_admin.post(f"{base}/permissions/subscription/billing", json=["reader"]).status_code == 204
        assert tenant_admin.get(f"{base}/permissions/subscription").json() == {"billing": ["reader"]}
        assert can_consume(broker, "reader", topic, "billing")
        assert not can_consume(broker, "other", topic, "billing"), "billing admits only reader"
        assert can_consume(broker, "other", topic, "anything-else")
        assert tenant_admin.delete(f"{base}/permissions/nosuch/reader").status_code == 400
        assert tenant_admin.delete(f"{base}/permissions/billing/reader").status_code == 204

        assert tenant_admin.post(f"{base}/subscriptionAuthMode", json="Everything").status_code == 400
        assert tenant_admin.post(f"{base}/subscriptionAuthMode", json="Prefix").status_code == 204
        assert tenant_admin.get(f"{base}/subscriptionAuthMode").json() == "Prefix"
        assert can_consume(broker, "reader", topic, "reader-jobs")
        assert not can_consume(broker, "reader", topic, "jobs")
        assert can_consume(broker, "acme-admin", topic, "jobs"), "tenant admins are not held to the prefix"


def test_schema_routes_reads_for_clients_changes_for_tenant_admins(broker: BrokerProcess, namespace: str) -> None:
    schema = f"/admin/v2/schemas/{namespace}/users/schema"
    upload = {"type": "STRING", "schema": "", "properties": {}}
    with http(broker, "acme-admin") as tenant_admin:
        assert tenant_admin.post(f"/admin/v2/namespaces/{namespace}/permissions/reader",
                                 json=["consume"]).status_code == 204
        assert tenant_admin.post(schema, json=upload).status_code == 200
    with http(broker, "reader") as reader:
        assert reader.get(schema).json()["type"] == "STRING"
        assert reader.post(schema, json=upload).status_code == 403
        assert reader.delete(schema).status_code == 403
    with http(broker, "stranger") as stranger:
        assert stranger.get(schema).status_code == 401
