"""Differences from Pulsar 4.x that the official Java client showed (tests/java), kept fixed:
each test names the Java call that failed against Magnetar before."""

from __future__ import annotations

import httpx
import pytest

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T


def test_producer_success_always_names_a_schema_version(broker: BrokerProcess, topic: str) -> None:
    """Java's ``newProducer().create()`` without a schema: ClientCnx reads schema_version from
    PRODUCER_SUCCESS unconditionally (Pulsar sends it empty), and a missing one dropped the
    connection, so the producer never got created."""
    with RawConnection.to_service(broker.service_url) as raw:
        raw.handshake()
        success = raw.create_producer(topic)
        assert success.HasField("schema_version")
        assert success.schema_version == b""
        again = raw.create_producer(topic, request_id=2)  # the same producer id again: Pulsar answers the same
        assert again.HasField("schema_version")


@pytest.mark.parametrize(("path", "reason"), [
    ("maxProducersPerTopic", "maxProducersPerTopic must be 0 or more"),
    ("maxConsumersPerTopic", "maxConsumersPerTopic must be 0 or more"),
    ("maxConsumersPerSubscription", "maxConsumersPerSubscription must be 0 or more"),
    ("maxSubscriptionsPerTopic", "maxSubscriptionsPerTopic must be 0 or more"),
    ("maxTopicsPerNamespace", "maxTopicsPerNamespace must be 0 or more"),
    ("maxUnackedMessagesPerConsumer", "maxUnackedMessagesPerConsumer must be 0 or more"),
    ("maxUnackedMessagesPerSubscription", "maxUnackedMessagesPerSubscription must be 0 or more"),
    ("messageTTL", "Invalid value for message TTL"),
])
def test_a_negative_namespace_limit_is_a_precondition_failure(admin: httpx.Client, path: str, reason: str) -> None:
    """Java's ``namespaces().setMaxProducersPerTopic(ns, -1)`` expects
    PulsarAdminException.PreconditionFailedException (412), as Pulsar answers; it got a 400."""
    r = admin.post(f"/admin/v2/namespaces/public/default/{path}", json=-1)
    assert r.status_code == 412
    assert r.json() == {"reason": reason}
    assert admin.post(f"/admin/v2/namespaces/public/default/{path}", json="x").status_code == 400
    assert admin.post(f"/admin/v2/namespaces/public/default/{path}", json=2**31).status_code == 400
    assert admin.post(f"/admin/v2/namespaces/public/default/{path}", json=0).status_code == 204
    assert admin.delete(f"/admin/v2/namespaces/public/default/{path}").status_code == 204


def test_peeked_message_times_are_iso_offset_date_times(admin: httpx.Client, broker: BrokerProcess,
                                                       topic: str) -> None:
    """Java's ``topics().peekMessages`` parses X-Pulsar-publish-time with ISO_OFFSET_DATE_TIME
    (Pulsar's DateFormatter); ``+0000`` failed it with a DateTimeParseException."""
    import datetime

    with RawConnection.to_service(broker.service_url) as raw:
        raw.handshake()
        raw.create_producer(topic)
        raw.send_message(0, 0, b"x")
        raw.expect(T.SEND_RECEIPT)
    path = topic.removeprefix("persistent://")
    assert admin.put(f"/admin/v2/persistent/{path}/subscription/s", json={"ledgerId": -1, "entryId": -1}).status_code \
        == 204
    r = admin.get(f"/admin/v2/persistent/{path}/subscription/s/position/1")
    assert r.status_code == 200
    published = r.headers["X-Pulsar-publish-time"]
    assert published.endswith("Z") and "+" not in published
    assert datetime.datetime.fromisoformat(published).tzinfo is not None
