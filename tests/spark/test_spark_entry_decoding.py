"""Entries split by the data source itself: every metadata shape, compression, and bad bytes."""

from __future__ import annotations

import pytest

from magnetar.spark.entry_decoding import EntryMessages, UnsupportedEntry, decode_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import BatchError, compress, make_batch
from magnetar.wire.frames import make_entry


def _metadata(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1_700_000_000_000, **fields)


def _single(**fields: object) -> pb.SingleMessageMetadata:
    return pb.SingleMessageMetadata(**fields)


MESSAGES = [
    (_single(sequence_id=1), b"plain"),
    (_single(sequence_id=(7 << 32) + 2, partition_key="k"), b"keyed"),
    (_single(event_time=1_700_000_000_123, sequence_id=3), b"timed"),
    (_single(properties=[pb.KeyValue(key="a", value="b")]), b"with properties"),
    (_single(partition_key="a-key-longer-than-127-bytes-" + "x" * 120), b"long key"),
    (_single(null_value=True, partition_key="tomb"), b""),
    (_single(ordering_key=b"o", sequence_id=9), b"ordering key"),
    (_single(), b"v" * 300),  # a two-byte payload size
    (_single(null_value=False), b""),  # an empty value is not a null one
]


@pytest.mark.parametrize("codec", [pb.NONE, pb.LZ4, pb.ZSTD])
def test_batches_split_into_every_field(codec: int) -> None:
    payload = make_batch(MESSAGES)
    meta = _metadata(num_messages_in_batch=len(MESSAGES), compression=codec, uncompressed_size=len(payload))
    decoded = decode_entry(make_entry(meta, compress(codec, payload)))
    assert decoded.batched and decoded.count == len(MESSAGES)
    assert decoded.values.to_pylist() == [b"plain", b"keyed", b"timed", b"with properties", b"long key", None,
                              b"ordering key", b"v" * 300, b""]
    assert decoded.keys == [None, "k", None, None, MESSAGES[4][0].partition_key, "tomb", None, None, None]
    assert decoded.event_ms == [0, 0, 1_700_000_000_123, 0, 0, 0, 0, 0, 0]
    assert decoded.properties == [{}, {}, {}, {"a": "b"}, {}, {}, {}, {}, {}]


def test_an_entry_outside_a_batch_is_one_message() -> None:
    meta = _metadata(partition_key="k", event_time=5, properties=[pb.KeyValue(key="x", value="y")])
    decoded = decode_entry(make_entry(meta, b"alone"))
    assert not decoded.batched
    assert (decoded.values.to_pylist(), decoded.keys, decoded.event_ms, decoded.properties) == \
        ([b"alone"], ["k"], [5], [{"x": "y"}])
    assert decode_entry(make_entry(_metadata(null_value=True), b"")).values.to_pylist() == [None]


def test_corrupt_entries_are_refused() -> None:
    payload = make_batch(MESSAGES[:2])
    entry = bytearray(make_entry(_metadata(num_messages_in_batch=2), payload))
    entry[-1] ^= 1
    with pytest.raises(BatchError, match="checksum"):
        decode_entry(bytes(entry))
    with pytest.raises(BatchError, match="left over"):
        decode_entry(make_entry(_metadata(num_messages_in_batch=1), payload))
    with pytest.raises(BatchError):
        decode_entry(make_entry(_metadata(num_messages_in_batch=3), payload))


def test_encrypted_and_chunked_entries_are_left_to_the_official_client() -> None:
    encrypted = _metadata(encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])
    with pytest.raises(UnsupportedEntry):
        decode_entry(make_entry(encrypted, b"secret"))
    with pytest.raises(UnsupportedEntry):
        decode_entry(make_entry(_metadata(chunk_id=0, num_chunks_from_msg=2, uuid="u"), b"part"))


def _decoded_batch(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> EntryMessages:
    return decode_entry(make_entry(_metadata(num_messages_in_batch=len(messages)), make_batch(messages)))


def test_runs_of_one_shape_with_their_own_sequence_ids_split_as_matrix_rows() -> None:
    # The official client's shape: every message has its sequence id; its varint widens at 128.
    messages = [(_single(sequence_id=i), b"%08d" % i) for i in range(300)]
    decoded = _decoded_batch(messages)
    assert decoded.values.to_pylist() == [value for _, value in messages]
    assert decoded.keys == [None] * 300 and decoded.event_ms == [0] * 300 and decoded.properties == [{}] * 300


def test_messages_of_another_shape_break_a_run_and_keep_their_fields() -> None:
    messages = [(_single(), b"%04d" % i) for i in range(40)] + [(_single(partition_key="k"), b"keyed")] + \
        [(_single(), b"%04d" % i) for i in range(40, 80)] + [(_single(), b"longer value")] + \
        [(_single(null_value=True), b"")] + [(_single(), b"%04d" % i) for i in range(80, 100)]
    decoded = _decoded_batch(messages)
    assert decoded.values.to_pylist() == [None if single.null_value else value for single, value in messages]
    assert decoded.keys == [single.partition_key or None for single, _ in messages]


def test_runs_of_wide_records_break_where_any_byte_of_their_shape_differs() -> None:
    # Records of 16 bytes and more are compared by their first bytes read as two 64-bit words:
    # a payload size of another value, and (with a three-byte size) a field of another number
    # in the ninth byte, each end a run.
    sized = [(_single(), b"%0100d" % i) for i in range(30)] + [(_single(), b"%0101d" % 30)] + \
        [(_single(), b"%0100d" % i) for i in range(31, 60)]
    decoded = _decoded_batch(sized)
    assert decoded.values.to_pylist() == [value for _, value in sized]
    big = 20_000
    shaped = [(_single(sequence_id=200 + i), bytes([i]) * big) for i in range(20)] + \
        [(_single(event_time=300), b"e" * big)] + [(_single(sequence_id=300 + i), bytes([i]) * big) for i in range(20)]
    decoded = _decoded_batch(shaped)
    assert decoded.values.to_pylist() == [value for _, value in shaped]
    assert decoded.event_ms == [0] * 20 + [300] + [0] * 20


def test_a_run_that_overruns_its_batch_is_refused() -> None:
    payload = make_batch([(_single(), b"%04d" % i) for i in range(50)])
    with pytest.raises(BatchError):
        decode_entry(make_entry(_metadata(num_messages_in_batch=51), payload))
    with pytest.raises(BatchError, match="left over"):
        decode_entry(make_entry(_metadata(num_messages_in_batch=49), payload))


def test_a_column_lays_out_every_kind_of_part_in_order() -> None:
    import pyarrow as pa

    from magnetar.spark.entry_decoding import BinaryColumn, RepeatedValue, StridedRun
    from magnetar.spark.message_ids import EntryIds
    with_nulls = pa.array([b"a", None, b"", b"bcd", None, b"efgh", b"i", None, b"jk", b"l"], pa.binary())
    ids = EntryIds(5, 6, 0, 300, b"\x08\x05\x10\x06", b"\x30\xac\x02", b"")
    column = BinaryColumn()
    column.pending += [b"x", None]
    column.add_part(StridedRun(b"..ab..cd..ef", 2, 4, 2, 3))
    column.add_chunk(with_nulls[3:9])  # a slice whose nulls and offsets start mid-buffer
    column.add_part(RepeatedValue(b"rep", 2))
    column.add_part(StridedRun(b"", 0, 0, 0, 2))
    column.add_part(ids.batch_id_run(126, 130))  # index varints of one and two bytes
    other = BinaryColumn()
    other.pending.append(b"moved")
    assert column.take_all(other) == 5 and not other.pending
    expected = [b"x", None, b"ab", b"cd", b"ef", *with_nulls[3:9].to_pylist(), b"rep", b"rep", b"", b"",
                *ids.batch_ids(126, 130).to_pylist(), b"moved"]
    laid_out = column.array()
    laid_out.validate(full=True)
    assert laid_out.to_pylist() == expected
    assert ids.batch_ids(126, 130).to_pylist() == [b"\x08\x05\x10\x06\x20" + bytes(v) + b"\x30\xac\x02"
                                                   for v in ([126], [127], [0x80, 1], [0x81, 1])]
    names = BinaryColumn()
    names.add_part(RepeatedValue(b"p1", 2))
    names.add_part(RepeatedValue("pé".encode(), 1))
    assert names.array(pa.string()).to_pylist() == ["p1", "p1", "pé"]
