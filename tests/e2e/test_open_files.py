"""Open files follow the topics in use: a flood of topics on a broker with few
descriptors fails only the requests that cannot be served, and once its client is gone
the idle topics are unloaded, their descriptors given back, and every topic still works."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import new_topic, quiet_logger, wait_until

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, producer
from magnetar.wire import pulsar_api_pb2 as pb

FLOOD = 400


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("open-files") / "data"
    proc = BrokerProcess(data, config={"idleTopicUnloadSeconds": "1"}, open_files_limit=256).start()
    yield proc
    proc.kill()


def flood(broker: BrokerProcess, topics: list[str]) -> dict[str, pb.BaseCommand]:
    """One connection asks for a producer on every topic at once; the replies by topic."""
    replies: dict[str, pb.BaseCommand] = {}
    with RawConnection.to_service(broker.service_url, timeout_s=30) as conn:
        conn.handshake()
        for index, topic in enumerate(topics):
            conn.send_command(producer(topic, index, index))
        for index, topic in enumerate(topics):
            frame = conn.read_until(lambda f, i=index: f.command.type in (T.PRODUCER_SUCCESS, T.ERROR) and (
                f.command.producer_success.request_id if f.command.type == T.PRODUCER_SUCCESS
                else f.command.error.request_id) == i)
            replies[topic] = frame.command
            if frame.command.type == T.PRODUCER_SUCCESS:
                conn.send_message(index, 0, topic.encode(), producer_name=f"p{index}")
        for _ in range(sum(r.type == T.PRODUCER_SUCCESS for r in replies.values())):
            answer = conn.read_until(lambda f: f.command.type in (T.SEND_RECEIPT, T.SEND_ERROR)).command
            producer_id = (answer.send_receipt if answer.type == T.SEND_RECEIPT else answer.send_error).producer_id
            replies[topics[producer_id]] = answer
    return replies


def test_a_topic_flood_fails_only_what_it_cannot_serve(broker: BrokerProcess) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        steady = new_topic("steady")
        consumer = client.subscribe(steady, "s")
        steady_producer = client.create_producer(steady)
        baseline = broker.open_files()

        topics = [new_topic("flood") for _ in range(FLOOD)]
        replies = flood(broker, topics)
        served = [t for t in topics if replies[t].type == T.SEND_RECEIPT]
        refused = [replies[t].error for t in topics if replies[t].type == T.ERROR]
        failed = [replies[t].send_error for t in topics if replies[t].type == T.SEND_ERROR]
        assert served, "the first topics fit in the descriptors"
        assert len(served) + len(refused) + len(failed) == FLOOD, "every request answered"
        assert all(e.error == pb.ServiceNotReady and "could not be loaded" in e.message for e in refused), \
            sorted({(e.error, e.message[-60:]) for e in refused})
        assert all(e.error == pb.PersistenceError and "Too many open files" in e.message for e in failed), failed[:3]

        steady_producer.send(b"during")  # a topic already loaded keeps working
        assert consumer.receive(timeout_millis=10_000).data() == b"during"

        wait_until(lambda: broker.open_files() <= baseline + 10, timeout_s=30,
                   what="idle topics unloaded and their descriptors closed")
        for topic in served[:: max(1, len(served) // 20)]:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == topic.encode()
            reader.close()
        # one refused during the flood (if the descriptors ran out), served now
        late = next((t for t in topics if replies[t].type == T.ERROR), new_topic("late"))
        client.create_producer(late).send(b"now")
        reader = client.create_reader(late, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=10_000).data() == b"now"
    finally:
        client.close()
