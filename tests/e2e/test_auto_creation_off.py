"""A broker with ``allowAutoTopicCreation=false``: unknown topics are TopicNotFound."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, partitioned_metadata, pb


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("no-autocreate") / "data"
    proc = BrokerProcess(data, config={"allowAutoTopicCreation": "false"}).start()
    yield proc
    proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    yield c
    c.close()


def test_producer_on_a_missing_topic_is_topic_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(new_topic())


def test_consumer_on_a_missing_topic_is_topic_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(new_topic(), "s")


def test_reader_on_a_missing_topic_is_topic_not_found(client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_reader(new_topic(), pulsar.MessageId.earliest)


def test_partitioned_metadata_of_a_missing_topic_still_answers(broker: BrokerProcess) -> None:
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.send_command(partitioned_metadata(new_topic(), 1))
        reply = conn.expect_reply(1, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    assert reply.response == pb.CommandPartitionedTopicMetadataResponse.Success
    assert reply.partitions == 0
