"""Small helpers the end-to-end modules share: fresh names, receiving, polling."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar

from magnetar.testing.polling import wait_until as wait_until

EARLIEST = pulsar.InitialPosition.Earliest


def quiet_logger() -> pulsar.ConsoleLogger:
    """The C++ client logs every connection at INFO; warnings are what a failing test needs."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def new_topic(prefix: str = "t", domain: str = "persistent") -> str:
    return f"{domain}://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def receive_n(consumer: pulsar.Consumer, n: int, timeout_ms: int = 5000) -> list[pulsar.Message]:
    """Exactly ``n`` messages, each within the timeout."""
    return [consumer.receive(timeout_millis=timeout_ms) for _ in range(n)]


def drain(consumer: pulsar.Consumer, quiet_ms: int = 300) -> list[pulsar.Message]:
    """Every message that arrives until the consumer stays quiet for ``quiet_ms``."""
    got: list[pulsar.Message] = []
    while True:
        try:
            got.append(consumer.receive(timeout_millis=quiet_ms))
        except pulsar.Timeout:
            return got


def nothing_arrives(consumer: pulsar.Consumer, within_ms: int = 300) -> bool:
    try:
        consumer.receive(timeout_millis=within_ms)
    except pulsar.Timeout:
        return True
    return False


def round_trip(service_url: str) -> None:
    """A well-behaved official client produces and consumes on a fresh topic."""
    client = pulsar.Client(service_url, operation_timeout_seconds=10, logger=quiet_logger())
    try:
        topic = new_topic("healthy")
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        producer = client.create_producer(topic)
        sent = producer.send(b"still serving")
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"still serving"
        assert msg.message_id() == sent
        consumer.acknowledge(msg)
    finally:
        client.close()


def segment_files(data_dir: Path, topic: str) -> list[Path]:
    """The segment files of a persistent topic, oldest first."""
    from magnetar.storage.segment_ledger import topic_dir_name

    directory = data_dir / "ledgers" / topic_dir_name(topic)
    return sorted(directory.glob("*.seg")) if directory.is_dir() else []


def read_topic(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every payload stored on a topic, read from the start with a reader."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000).data())
    reader.close()
    return out


def ack_part_of_a_batch(client: pulsar.Client, topic: str, consumer: pulsar.Consumer, count: int, acked: int) -> None:
    """Publish ``count`` messages as one batch (b0, b1, ...), receive them all, acknowledge
    the first ``acked`` one by one, and close the consumer."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000,
                                      batching_max_messages=count)
    for i in range(count):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    got = receive_n(consumer, count)
    assert {m.message_id().batch_index() for m in got} == set(range(count))
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) == 1
    for m in got[:acked]:
        consumer.acknowledge(m)
    consumer.close()
