"""Keep-alive on a broker with ``keepAliveIntervalSeconds=1``: silent peers are dropped."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, ping

INTERVAL_S = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("keepalive") / "data"
    proc = BrokerProcess(data, config={"keepAliveIntervalSeconds": str(INTERVAL_S)}).start()
    yield proc
    proc.kill()


def test_connection_that_never_answers_ping_is_closed(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        started = time.monotonic()
        pings = [f for f in conn.frames_for(8 * INTERVAL_S, answer_pings=False) if f.command.type == T.PING]
        assert conn.closed_by_peer, "an unanswered PING must cost the connection"
        assert pings, "the broker pings before it gives up"
        assert time.monotonic() - started < 5 * INTERVAL_S  # two ticks: ping, then give up


def test_connection_that_answers_ping_stays_open(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        frames = conn.frames_for(3.2 * INTERVAL_S, answer_pings=True)
        assert len([f for f in frames if f.command.type == T.PING]) >= 2
        assert not conn.closed_by_peer
        conn.send_command(ping())
        conn.expect(T.PONG)


def test_connection_without_handshake_is_closed(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        assert conn.wait_closed(3 * INTERVAL_S)


def test_official_client_stays_connected_through_idle_periods(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        with pytest.raises(pulsar.Timeout):  # idle for several keep-alive intervals
            consumer.receive(timeout_millis=2600 * INTERVAL_S)
        assert consumer.is_connected() and producer.is_connected()
        producer.send(b"after idling")
        assert consumer.receive(timeout_millis=5000).data() == b"after idling"
    finally:
        client.close()
