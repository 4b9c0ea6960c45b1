"""advertisedListeners: a client that names its listener is sent to that listener's address."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger

from magnetar.testing.broker_process import BrokerProcess, free_port
from magnetar.testing.raw_client import RawConnection, T, lookup
from magnetar.wire import pulsar_api_pb2 as pb

EXTERNAL_HOST = "127.0.0.2"  # another loopback address: reachable only if the lookup says so
INTERNAL_PORT = free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    # the internal address leads nowhere, so a client can only work through the external one
    proc = BrokerProcess(tmp_path_factory.mktemp("listeners") / "data", config={
        "bindAddress": "0.0.0.0",
        "advertisedListeners": f"internal:pulsar://127.0.0.1:{INTERNAL_PORT},external:pulsar://{EXTERNAL_HOST}:{port}",
        "internalListenerName": "internal",
    })
    proc.port = port
    proc.start()
    yield proc
    proc.kill()


def lookup_with(conn: RawConnection, request_id: int, listener: str | None) -> pb.CommandLookupTopicResponse:
    cmd = lookup(new_topic(), request_id)
    if listener is not None:
        cmd.lookupTopic.advertised_listener_name = listener
    conn.send_command(cmd)
    return conn.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse


def test_lookups_answer_the_named_listener(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        assert lookup_with(conn, 1, None).brokerServiceUrl == f"pulsar://127.0.0.1:{INTERNAL_PORT}"
        assert lookup_with(conn, 2, "external").brokerServiceUrl == f"pulsar://{EXTERNAL_HOST}:{broker.port}"
        unknown = lookup_with(conn, 3, "elsewhere")
        assert unknown.response == pb.CommandLookupTopicResponse.Failed
        assert unknown.error == pb.ServiceNotReady and "do not have elsewhere listener" in unknown.message
    web = httpx.get(f"{broker.web_url}/lookup/v2/topic/persistent/public/default/x",
                    headers={"X-Pulsar-ListenerName": "external"}).json()
    assert web["brokerUrl"] == f"pulsar://{EXTERNAL_HOST}:{broker.port}"


def test_the_official_client_follows_its_listener(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, listener_name="external", operation_timeout_seconds=10,
                           logger=quiet_logger())
    try:
        topic = new_topic("listener")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"through the external listener")
        assert consumer.receive(timeout_millis=10_000).data() == b"through the external listener"
    finally:
        client.close()


def test_a_bad_listener_list_stops_the_broker_with_a_clear_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    proc = BrokerProcess(tmp_path_factory.mktemp("bad-listeners") / "data",
                         config={"advertisedListeners": "internal:http://127.0.0.1:1"})
    with pytest.raises(RuntimeError, match="advertisedListeners"):
        proc.start(timeout_s=20)
