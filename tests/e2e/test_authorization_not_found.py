"""With authorization on, a topic in a tenant or namespace that does not exist is not
found before it is not allowed, as in Pulsar 4.x; an existing namespace the role may
not use is still refused without saying more.

``test_create_producer_failure`` mirrors the official client's asyncio test of that
name, run as its CI runs it (authentication on, an anonymous role allowed on
``public/default``): a producer for ``tenant/ns/...`` fails with ``TopicNotFound``.
"""

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
    data = tmp_path_factory.mktemp("authz-nf") / "data"
    proc = BrokerProcess(data, {"authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
                                "tokenSecretKey": SECRET_DATA_URL, "authorizationEnabled": "true",
                                "superUserRoles": "admin", "anonymousUserRole": "anonymous"}).start()
    with http("admin", proc) as admin:
        answer = admin.post("/admin/v2/namespaces/public/default/permissions/anonymous",
                            json=["produce", "consume"])
        assert answer.status_code == 204, answer.text
    yield proc
    proc.kill()


def http(role: str, broker: BrokerProcess) -> httpx.Client:
    return httpx.Client(base_url=broker.web_url, timeout=10, headers={"Authorization": f"Bearer {token(role)}"})


@pytest.fixture
def tenant(broker: BrokerProcess) -> str:
    """A tenant of its own administered by ``acme-admin``, with namespace ``app``."""
    name = f"acme-{uuid.uuid4().hex[:6]}"
    with http("admin", broker) as admin:
        assert admin.put(f"/admin/v2/tenants/{name}", json={"adminRoles": ["acme-admin"],
                                                            "allowedClusters": ["standalone"]}).status_code == 204
        assert admin.put(f"/admin/v2/namespaces/{name}/app").status_code == 204
    return name


def test_create_producer_failure(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        client.create_producer("persistent://public/default/allowed").send(b"x")  # the anonymous role's own
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("tenant/ns/asyncio-test-send-failure")
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe("tenant/ns/asyncio-test-send-failure", "s")
    finally:
        client.close()


def test_a_missing_namespace_of_an_existing_tenant_is_not_found(broker: BrokerProcess, tenant: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5, logger=quiet_logger())
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"persistent://{tenant}/missing/t")
        with pytest.raises(pulsar.AuthorizationError):  # it exists: not the anonymous role's
            client.create_producer(f"persistent://{tenant}/app/t")
    finally:
        client.close()


def raw_answers(broker: BrokerProcess, topic: str) -> list[tuple[int, str]]:
    """The error and message of a lookup, a partitioned-metadata request, a producer and a
    subscription for ``topic`` by the role ``nobody``."""
    with RawConnection.to_service(broker.service_url) as raw:
        raw.send_command(pb.BaseCommand(type=T.CONNECT, connect=pb.CommandConnect(
            client_version="raw", protocol_version=21, auth_method_name="token", auth_data=token("nobody").encode())))
        raw.expect(T.CONNECTED)
        raw.send_command(pb.BaseCommand(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=1)))
        lookup = raw.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
        metadata_request = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=2)
        raw.send_command(pb.BaseCommand(type=T.PARTITIONED_METADATA, partitionMetadata=metadata_request))
        meta = raw.expect(T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        raw.send_command(pb.BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=1, request_id=3)))
        produce = raw.expect(T.ERROR).command.error
        raw.send_command(pb.BaseCommand(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
            topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=4)))
        subscribe = raw.expect(T.ERROR).command.error
    return [(lookup.error, lookup.message), (meta.error, meta.message), (produce.error, produce.message),
            (subscribe.error, subscribe.message)]


def test_every_command_answers_not_found_first(broker: BrokerProcess, tenant: str) -> None:
    for namespace in ("no-such-tenant/ns", f"{tenant}/missing"):
        expected = (pb.TopicNotFound, f"Tenant or namespace or topic does not exist: {namespace}")
        assert raw_answers(broker, f"persistent://{namespace}/t") == [expected] * 4
    assert [error for error, _ in raw_answers(broker, f"persistent://{tenant}/app/t")] == [pb.AuthorizationError] * 4


def test_admin_routes_answer_404_before_403(broker: BrokerProcess, tenant: str) -> None:
    with http("someone", broker) as someone, http("admin", broker) as admin:
        for path, reason in (("/admin/v2/persistent/no-such-tenant/ns/t/stats", "Tenant does not exist"),
                             (f"/admin/v2/persistent/{tenant}/missing/t/stats", "Namespace does not exist")):
            answer = someone.get(path)
            assert (answer.status_code, answer.json()["reason"]) == (404, reason), path
        assert someone.get(f"/admin/v2/persistent/{tenant}/app/t/stats").status_code == 401  # exists, not theirs
        assert someone.post("/admin/v2/namespaces/no-such-tenant/ns/deduplication", json=True).status_code == 404
        assert someone.post(f"/admin/v2/namespaces/{tenant}/app/deduplication", json=True).status_code == 403
        assert someone.put(f"/admin/v2/namespaces/{tenant}/other").status_code == 403  # creation: no 404
        assert admin.get(f"/admin/v2/persistent/{tenant}/missing/t/stats").status_code == 404
