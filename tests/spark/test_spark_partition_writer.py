"""The executor-side writer against a real broker, without Spark: routing, sequence ids and the
rows a retry skips, for value-only batches (sent target by target) and rows with metadata alike."""

from __future__ import annotations

from collections import Counter

import pulsar
import pyarrow as pa
import pytest
from spark_helpers import Admin, client_for, new_topic

from magnetar.spark.options import parse_sink_options
from magnetar.spark.sink import PartitionWriter, sequence_id
from magnetar.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.spark
PARTITIONS = 3


def _batches(values: list[bytes], size: int, *, with_key_column: bool) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, len(values), size):
        columns = {"value": pa.array(values[start:start + size], pa.binary())}
        if with_key_column:  # all null: routed like keyless rows, but by the row-at-a-time path
            columns["__key"] = pa.nulls(len(columns["value"]), pa.string())
        out.append(pa.RecordBatch.from_pydict(columns))
    return out


def _partition_contents(broker: BrokerProcess, topic: str) -> dict[int, list[bytes]]:
    client = client_for(broker.service_url)
    out: dict[int, list[bytes]] = {}
    for i, partition in enumerate(client.get_topic_partitions(topic)):
        reader = client.create_reader(partition, pulsar.MessageId.earliest)
        out[i] = []
        while reader.has_message_available():
            out[i].append(reader.read_next(timeout_millis=10_000).data())
        reader.close()
    client.close()
    return out


@pytest.mark.parametrize("with_key_column", [False, True], ids=["values-only", "row-at-a-time"])
@pytest.mark.parametrize("partition_id", [0, 2])
def test_a_retry_after_an_early_end_publishes_only_the_missing_rows(
        broker: BrokerProcess, admin: Admin, with_key_column: bool, partition_id: int) -> None:
    topic = new_topic("writer")
    admin.create_partitioned(topic, PARTITIONS)
    options = parse_sink_options({"service.url": broker.service_url, "admin.url": broker.web_url,
                                  "topic": topic}, streaming=False)
    values = [f"row-{i + 1}".encode() for i in range(2500)]
    name, epoch = f"writer-test-{partition_id}", 3

    # The first attempt sees its input end early but cleanly, mid-batch (an upstream failure).
    first = PartitionWriter(options, name, epoch=epoch, partition_id=partition_id).write(
        iter(_batches(values[:1000], 700, with_key_column=with_key_column)))
    assert (first.rows, first.duplicates, sum(first.sent.values())) == (1000, 0, 1000)

    # The retry sees every row, in batches cut elsewhere, and sends only what the broker lacks.
    retry = PartitionWriter(options, name, epoch=epoch, partition_id=partition_id).write(
        iter(_batches(values, 450, with_key_column=with_key_column)))
    assert (retry.rows, retry.duplicates, sum(retry.sent.values())) == (2500, 1000, 1500)

    contents = _partition_contents(broker, topic)
    assert not [v for v, n in Counter(v for vs in contents.values() for v in vs).items() if n > 1]
    # Keyless row r (1-based) of Spark partition p goes to topic partition (r + p) % n, in order.
    for k in range(PARTITIONS):
        assert contents[k] == [values[r - 1] for r in range(1, 2501) if (r + partition_id) % PARTITIONS == k]

    # Each producer learns the last sequence id stored under its name: that of its last row.
    client = client_for(broker.service_url)
    try:
        for k, partition in enumerate(client.get_topic_partitions(topic)):
            last_row = max(r for r in range(1, 2501) if (r + partition_id) % PARTITIONS == k)
            producer = client.create_producer(partition, producer_name=name)
            assert producer.last_sequence_id() == sequence_id(epoch, last_row)
            producer.close()
    finally:
        client.close()

    # Running the whole partition again adds nothing.
    again = PartitionWriter(options, name, epoch=epoch, partition_id=partition_id).write(
        iter(_batches(values, 1000, with_key_column=with_key_column)))
    assert (again.duplicates, sum(again.sent.values())) == (2500, 0)
