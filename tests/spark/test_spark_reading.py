"""The executor-side range reader against a real broker, without Spark: every row it builds an
entry at a time must equal what the client says about each message on its own."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from spark_helpers import Admin, client_for, new_topic

from magnetar.spark import entry_decoding, wire_session
from magnetar.spark.message_ids import EntryIds, decode_fields, encode_varint, read_varint
from magnetar.spark.offsets import EARLIEST, MessagePosition
from magnetar.spark.options import parse_source_options
from magnetar.spark.reading import MagnetarInputPartition, read_range
from magnetar.testing.broker_process import BrokerProcess
from magnetar.wire import pulsar_api_pb2 as pb

pytestmark = pytest.mark.spark
NAMESPACE = "public/nodedup"

Row = tuple[Any, ...]


def test_varints_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, 1 << 40):
        encoded = encode_varint(value)
        assert read_varint(encoded, 0) == (value, len(encoded))


def test_entry_ids_name_every_message_of_the_entry_as_protobuf_would() -> None:
    def serialized(batch_index: int) -> bytes:
        return pb.MessageIdData(ledgerId=12, entryId=345, partition=2, batch_index=batch_index,
                                batch_size=20_000).SerializeToString()

    ids = EntryIds.parse(serialized(100))
    assert (ids.ledger_id, ids.entry_id, ids.batch_index, ids.batch_size) == (12, 345, 100, 20_000)
    assert ids.rest_of_entry == 19_899 and ids.entry_size_known
    assert ids.following(19_899) == [serialized(i) for i in range(101, 20_000)]
    assert ids.with_batch_index(7) == serialized(7)
    assert decode_fields(serialized(3)) == {1: 12, 2: 345, 3: 2, 4: 3, 6: 20_000}

    # Arrow ranges of ids, across the one-, two- and three-byte batch indexes, twice per layout
    # (the second from the cached layout).
    for lo, hi in ((0, 1), (0, 20_000), (100, 300), (127, 129), (16_000, 17_000), (0, 20_000), (5, 5)):
        assert ids.batch_ids(lo, hi).to_pylist() == [serialized(i) for i in range(lo, hi)]
    unpartitioned = EntryIds.parse(pb.MessageIdData(ledgerId=1, entryId=2, batch_index=0,
                                                    batch_size=300).SerializeToString())
    assert unpartitioned.batch_ids(0, 300).to_pylist() == \
        [pb.MessageIdData(ledgerId=1, entryId=2, batch_index=i, batch_size=300).SerializeToString()
         for i in range(300)]

    single = EntryIds.parse(pulsar.MessageId(-1, 4, 5, -1).serialize())
    assert (single.batch_index, single.batch_size, single.rest_of_entry, single.entry_size_known) == (-1, 0, 0, True)


def _publish(client: pulsar.Client, topic: str) -> None:
    """Batches of up to 300 messages (two-byte batch indexes), then messages outside batches."""
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=300,
                                     batching_max_publish_delay_ms=60_000, block_if_queue_full=True)
    for i in range(700):
        batched.send_async(f"b{i}".encode(), None, partition_key=f"k{i % 7}" if i % 3 else None,
                           properties={"i": str(i)} if i % 5 == 0 else None,
                           event_timestamp=1_700_000_000_000 + i if i % 2 else None)
    batched.flush()
    batched.close()
    single = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        single.send(f"s{i}".encode(), partition_key="single" if i % 2 else None)
    single.close()


def _exact_rows(client: pulsar.Client, topic: str) -> list[tuple[MessagePosition, Row]]:
    """Every message as the client describes it, one call per field."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=10_000)
        mid = msg.message_id()
        event = msg.event_timestamp()
        out.append((MessagePosition(mid.ledger_id(), mid.entry_id(), mid.batch_index()),
                    (msg.data(), msg.partition_key() or None, mid.serialize(), msg.publish_timestamp(),
                     event or None, msg.properties(), msg.producer_name())))
    reader.close()
    return out


def _scan(broker: BrokerProcess, topic: str, start: MessagePosition, end: MessagePosition) -> list[Row]:
    options = parse_source_options({"service.url": broker.service_url, "admin.url": broker.web_url,
                                    "topic": topic}, streaming=False)
    rows: list[Row] = []
    for batch in read_range(MagnetarInputPartition(topic, start, end), options):
        for r in batch.to_pylist():
            assert r["__topic"] == topic and r["__redeliveryCount"] == 0
            event = r["__eventTime"]
            rows.append((r["value"], r["__key"], r["__messageId"], int(r["__publishTime"].timestamp() * 1000),
                         int(event.timestamp() * 1000) if event is not None else None,
                         dict(r["__messageProperties"]), r["__producerName"]))
    return rows


@pytest.mark.parametrize("path", ["entries", "entries-then-client", "client", "client-one-by-one"])
def test_ranges_read_an_entry_at_a_time_equal_the_client_per_message(
        broker: BrokerProcess, admin: Admin, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Entries split by the data source itself, and the official client's Reader (used when the
    connection settings need it), give what the client gives message by message."""
    if path == "entries-then-client":
        # Entries outside a batch stand for those only the official client reads (encrypted,
        # chunked): the scan hands over to it from the last message it gave Spark.
        decode = entry_decoding.decode_entry

        def batches_only(entry: bytes) -> entry_decoding.EntryMessages:
            decoded = decode(entry)
            if not decoded.batched:
                raise entry_decoding.UnsupportedEntry("not a batch")
            return decoded
        monkeypatch.setattr(entry_decoding, "decode_entry", batches_only)
    if path.startswith("client"):
        monkeypatch.setattr(wire_session, "supports", lambda connection: False)
    if path == "client-one-by-one":
        # The check of an entry's last id fails: the reader must fall back to each message's own id.
        monkeypatch.setattr(EntryIds, "with_batch_index", lambda self, index: b"no such id")
    topic = new_topic("scan", NAMESPACE)
    admin.create_topic(topic)
    client = client_for(broker.service_url)
    try:
        _publish(client, topic)
        exact = _exact_rows(client, topic)
    finally:
        client.close()
    positions = [p for p, _ in exact]
    rows = [r for _, r in exact]
    assert len(rows) == 705 and max(p.batch_index for p in positions) >= 128

    def whole(p: MessagePosition) -> MessagePosition:
        return MessagePosition(p.ledger_id, p.entry_id, -1)

    def after(bound: MessagePosition) -> int:
        """Index of the first message after ``bound`` in storage order."""
        return next((i for i, p in enumerate(positions) if p > bound), len(positions))

    first_batch_end = next(i for i, p in enumerate(positions) if not p.same_entry(positions[0])) - 1
    cases = [
        (EARLIEST, positions[-1]),                        # everything
        (EARLIEST, whole(positions[-1])),                  # up to the last entry, whole
        (positions[10], positions[450]),                   # mid-batch to mid-batch, across entries
        (positions[150], positions[170]),                  # inside one entry
        (positions[299], whole(positions[300])),           # to a whole batch entry
        (whole(positions[0]), positions[702]),             # from after a whole entry to a single message
        (positions[first_batch_end], positions[first_batch_end + 1]),  # one message
        (positions[698], positions[-1]),                   # the tail of a batch, then single messages
    ]
    for start, end in cases:
        expected = rows[after(start):after(end)]
        assert expected, (start, end)
        assert _scan(broker, topic, start, end) == expected, (start, end)
