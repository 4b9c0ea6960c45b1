"""Deduplication recovers sequence ids from stored metadata, never from payloads.

Regression tests named for the official client's tests whose broker side they mirror:
``test_producer_deduplication`` (enabling deduplication on a namespace answered 500
because an earlier encrypted LZ4 batch could not be decompressed) and
``test_producer_sequence_after_reconnection`` (a producer's last sequence id after
reconnecting, here across a broker restart, with such a batch stored).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
from e2e_helpers import quiet_logger

from magnetar.testing.broker_process import BrokerProcess
from magnetar.testing.raw_client import RawConnection, T, pb


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("dedup-meta") / "data").start()
    yield proc
    proc.kill()


def new_namespace(admin: httpx.Client) -> str:
    namespace = f"public/dedup-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/namespaces/{namespace}").status_code == 204
    return namespace


def store_unreadable_batches(broker: BrokerProcess, topic: str, producer_name: str, first: int) -> int:
    """An encrypted LZ4 batch of three (ciphertext: it does not decompress) and an LZ4 batch
    of two whose payload is cut short; returns the last sequence id they carry."""
    with RawConnection.to_service(broker.service_url) as conn:
        conn.handshake()
        conn.create_producer(topic, producer_id=0, request_id=1, producer_name=producer_name, encrypted=True)
        encrypted = pb.MessageMetadata(num_messages_in_batch=3, compression=pb.LZ4, uncompressed_size=300,
                                       encryption_algo="RSA", encryption_param=b"\x01" * 12)
        encrypted.encryption_keys.append(pb.EncryptionKeys(key="client-rsa.pem", value=b"\x02" * 32))
        conn.send_message(0, first, b"\x93\x17 not lz4 at all " * 4, producer_name=producer_name,
                          metadata=encrypted, highest_sequence_id=first + 2)
        assert conn.expect(T.SEND_RECEIPT, timeout_s=10).command.send_receipt.sequence_id == first
        chunk = pb.MessageMetadata(num_messages_in_batch=2, compression=pb.ZSTD, uncompressed_size=64,
                                   uuid=f"{producer_name}-u", num_chunks_from_msg=1, chunk_id=0,
                                   total_chunk_msg_size=5)
        chunk.encryption_keys.append(pb.EncryptionKeys(key="client-rsa.pem", value=b"\x03" * 32))
        conn.send_message(0, first + 3, b"\x28\xb5", producer_name=producer_name, metadata=chunk,
                          highest_sequence_id=first + 4)
        assert conn.expect(T.SEND_RECEIPT, timeout_s=10).command.send_receipt.sequence_id == first + 3
    return first + 4


def test_producer_deduplication(broker: BrokerProcess, admin: httpx.Client) -> None:
    namespace = new_namespace(admin)
    topic = f"persistent://{namespace}/t"
    last = store_unreadable_batches(broker, topic, "p-enc", 10)
    answer = admin.post(f"/admin/v2/namespaces/{namespace}/deduplication", json=True)
    assert answer.status_code == 204, answer.text
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, producer_name="p-enc", batching_enabled=False)
        assert producer.last_sequence_id() == last
        producer.send(b"next", sequence_id=last + 1)
        producer.close()
        again = client.create_producer(topic, producer_name="p-enc", batching_enabled=False)
        assert again.last_sequence_id() == last + 1
    finally:
        client.close()


def test_producer_sequence_after_reconnection(broker: BrokerProcess, admin: httpx.Client) -> None:
    namespace = new_namespace(admin)
    assert admin.post(f"/admin/v2/namespaces/{namespace}/deduplication", json=True).status_code == 204
    topic = f"persistent://{namespace}/t"
    last = store_unreadable_batches(broker, topic, "p-reconnect", 0)
    broker.restart()  # recovery replays the stored entries, unreadable payloads included
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, producer_name="p-reconnect", batching_enabled=False)
        assert producer.last_sequence_id() == last
        for _ in range(3):
            producer.send(b"m")
        producer.close()
        again = client.create_producer(topic, producer_name="p-reconnect", batching_enabled=False)
        assert again.last_sequence_id() == last + 3
    finally:
        client.close()


def test_a_batch_of_explicit_ids_is_recorded_by_its_last_id_across_a_restart(broker: BrokerProcess,
                                                                             admin: httpx.Client) -> None:
    """The official client's batch carries neither highest_sequence_id nor ids that follow
    one another here: the broker records it by its last message's id, now and after
    recovering from the stored metadata alone."""
    namespace = new_namespace(admin)
    assert admin.post(f"/admin/v2/namespaces/{namespace}/deduplication", json=True).status_code == 204
    topic = f"persistent://{namespace}/t"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, producer_name="p-explicit", batching_enabled=True,
                                          batching_max_publish_delay_ms=60_000, batching_max_messages=3)
        for sequence_id in (10, 20, 35):
            producer.send_async(b"m", None, sequence_id=sequence_id)
        producer.flush()
        producer.close()
        assert client.create_producer(topic, producer_name="p-explicit").last_sequence_id() == 35
    finally:
        client.close()
    broker.restart()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        assert client.create_producer(topic, producer_name="p-explicit").last_sequence_id() == 35
    finally:
        client.close()
