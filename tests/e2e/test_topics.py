"""Topic names, domains, namespaces and pattern subscriptions."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest
from e2e_helpers import EARLIEST, drain, new_topic, nothing_arrives, receive_n, segment_files

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, lookup, partitioned_metadata, pb


def test_short_and_full_names_are_the_same_topic(client: pulsar.Client) -> None:
    local = f"short-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(f"persistent://public/default/{local}", "s")
    client.create_producer(local).send(b"short")
    client.create_producer(f"public/default/{local}").send(b"tenant/ns/topic")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"short", b"tenant/ns/topic"]


def test_non_persistent_topic_delivers_to_connected_consumers_only(
        broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = new_topic("np", domain="non-persistent")
    connected = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in receive_n(connected, 5)] == [f"m{i}".encode() for i in range(5)]
    late = client.subscribe(topic, "late", initial_position=EARLIEST)
    assert nothing_arrives(late), "a non-persistent topic keeps nothing for later subscribers"
    producer.send(b"after")
    assert late.receive(timeout_millis=5000).data() == b"after"
    assert connected.receive(timeout_millis=5000).data() == b"after"
    ledgers = broker.data_dir / "ledgers"
    on_disk = [p.name for p in ledgers.iterdir()] if ledgers.is_dir() else []
    assert not [name for name in on_disk if name.startswith("non-persistent")]
    assert segment_files(broker.data_dir, topic) == []


def test_non_persistent_messages_without_consumers_are_dropped(client: pulsar.Client) -> None:
    topic = new_topic("np", domain="non-persistent")
    producer = client.create_producer(topic)
    assert producer.send(b"nobody listens") is not None
    consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
    producer.send(b"someone listens")
    assert [m.data() for m in drain(consumer)] == [b"someone listens"]


@pytest.mark.parametrize("name", [
    "persistent://public/default/",
    "bogus://public/default/t",
    "persistent://public/t",
    "persistent:///default/t",
])
def test_invalid_topic_names_are_refused(client: pulsar.Client, name: str) -> None:
    with pytest.raises(pulsar.InvalidTopicName):
        client.create_producer(name)


@pytest.mark.parametrize("name", [
    "persistent://pub lic/default/t",
    "persistent://public/def*ault/t",
    "persistent://public/default/new\nline",
    "persistent://public/default/a/b",
    "nonsense://public/default/t",
])
def test_broker_refuses_invalid_names_with_invalid_topic_name(broker: BrokerProcess, name: str) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(partitioned_metadata(name, 1))
        meta = conn.expect_reply(1, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        conn.send_command(lookup(name, 2))
        found = conn.expect_reply(2, T.LOOKUP_RESPONSE).command.lookupTopicResponse
        conn.send_command(pb.BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=name, producer_id=0, request_id=3)))
        error = conn.expect_reply(3, T.ERROR).command.error
    assert meta.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert meta.error == pb.InvalidTopicName and meta.message
    assert found.response == pb.CommandLookupTopicResponse.Failed
    assert found.error == pb.InvalidTopicName and found.message
    assert error.error == pb.InvalidTopicName and "Invalid" in error.message


def test_topic_in_a_missing_namespace_is_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://public/no-such-namespace/t-{uuid.uuid4().hex[:6]}")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(f"persistent://no-such-tenant/default/t-{uuid.uuid4().hex[:6]}", "s")


def test_pattern_subscription_finds_matching_topics(client: pulsar.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    matching = [f"persistent://public/default/pat-{tag}-{suffix}" for suffix in ("a", "b", "c")]
    other = f"persistent://public/default/other-{tag}"
    for name in [*matching, other]:
        client.create_producer(name).send(name.encode())
    consumer = client.subscribe(re.compile(f"persistent://public/default/pat-{tag}-.*"), "s",
                                initial_position=EARLIEST)
    got = receive_n(consumer, 3)
    assert sorted(m.data() for m in got) == sorted(n.encode() for n in matching)
    assert {m.topic_name() for m in got} == set(matching)
    assert nothing_arrives(consumer)


def test_pattern_subscription_ignores_non_persistent_topics_by_default(client: pulsar.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    persistent = f"persistent://public/default/mixed-{tag}"
    client.create_producer(persistent).send(b"p")
    client.create_producer(f"non-persistent://public/default/mixed-{tag}-np").send(b"np")
    consumer = client.subscribe(re.compile(f"persistent://public/default/mixed-{tag}.*"), "s",
                                initial_position=EARLIEST)
    assert [m.data() for m in drain(consumer)] == [b"p"]
