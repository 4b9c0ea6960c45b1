"""Producer deduplication with the official client against a real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from e2e_helpers import read_topic

from magnetar.core.positions import to_signed64
from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, pb


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("dedup") / "data",
                         {"brokerDeduplicationEnabled": "true", "brokerDeduplicationEntriesInterval": "10"}).start()
    yield proc
    proc.kill()


def test_explicit_sequence_ids_are_deduplicated(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p-dedup")
    for i in range(5):
        producer.send(f"m{i}".encode(), sequence_id=i)
    producer.send(b"again", sequence_id=3)
    producer.send(b"m5", sequence_id=5)
    assert read_topic(client, topic) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_producer_resumes_from_last_sequence_id(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p-resume")
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    again = client.create_producer(topic, producer_name="p-resume")
    assert again.last_sequence_id() == 2
    again.send(b"m3")
    assert read_topic(client, topic) == [b"m0", b"m1", b"m2", b"m3"]


def test_dedup_survives_kill_and_restart(broker: BrokerProcess, topic: str) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    producer = client.create_producer(topic, producer_name="p-crash")
    for i in range(25):
        producer.send(f"m{i}".encode(), sequence_id=i)
    client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    producer = client.create_producer(topic, producer_name="p-crash")
    assert producer.last_sequence_id() == 24
    for i in range(20, 30):
        producer.send(f"m{i}".encode(), sequence_id=i)
    assert read_topic(client, topic) == [f"m{i}".encode() for i in range(30)]
    client.close()


def test_last_chunk_sent_after_the_first_is_persisted_is_stored(broker: BrokerProcess, client: pulsar.Client,
                                                                topic: str) -> None:
    """A chunk before the last must not record the message's sequence id when it is persisted:
    the last chunk, arriving after that, would be judged a duplicate and the message lost."""
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.create_producer(topic, producer_id=0, request_id=1, producer_name="p-chunks")
        receipts = []
        for chunk_id, part in enumerate((b"first half|", b"second half")):
            meta = pb.MessageMetadata(uuid="p-chunks-0", num_chunks_from_msg=2, chunk_id=chunk_id,
                                      total_chunk_msg_size=22)
            conn.send_message(0, 0, part, producer_name="p-chunks", metadata=meta)
            receipts.append(conn.expect(T.SEND_RECEIPT, timeout_s=10).command.send_receipt.message_id)
        conn.send_message(0, 0, b"whole retry", producer_name="p-chunks")  # the message, sent again
        duplicate = conn.expect(T.SEND_RECEIPT, timeout_s=10).command.send_receipt.message_id
    assert receipts[1].entryId == receipts[0].entryId + 1
    assert to_signed64(duplicate.entryId) == -1
    assert read_topic(client, topic) == [b"first half|second half"]


def test_a_repeated_id_among_pipelined_sends_is_judged_alone(broker: BrokerProcess, client: pulsar.Client,
                                                            topic: str) -> None:
    """Sends that arrive in one read go through deduplication one at a time. An id repeated
    while its first send is not yet stored cannot be judged yet: as Pulsar does, that send
    gets a retryable error, the others their receipts in order, and the message is stored once."""
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.create_producer(topic, producer_id=0, request_id=1, producer_name="p-pipelined")
        with conn.corked():
            for seq in (0, 1, 2, 1, 3):
                conn.send_message(0, seq, f"m{seq}".encode(), producer_name="p-pipelined")
        answers = [conn.next_frame(10) for _ in range(5)]
    errors = [f.command.send_error for f in answers if f is not None and f.command.type == T.SEND_ERROR]
    receipts = [f.command.send_receipt for f in answers if f is not None and f.command.type == T.SEND_RECEIPT]
    assert [(e.sequence_id, e.error) for e in errors] == [(1, pb.PersistenceError)]
    assert [r.sequence_id for r in receipts] == [0, 1, 2, 3]
    entry_ids = [r.message_id.entryId for r in receipts]
    assert entry_ids == list(range(entry_ids[0], entry_ids[0] + 4))
    assert read_topic(client, topic) == [b"m0", b"m1", b"m2", b"m3"]
