"""Batch payloads and compression (magnetar.wire.batch)."""

from __future__ import annotations

import zlib

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import (
    BatchError,
    compress,
    decompress,
    is_batch,
    iter_batch,
    last_sequence_id,
    make_batch,
)
from magnetar.wire.frames import ProtocolError, make_entry, parse_entry

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
COMPRESSING_CODECS = CODECS[1:]
TEXT = b"the quick brown fox jumps over the lazy dog " * 50


def single(sequence_id: int | None = None, key: str | None = None) -> pb.SingleMessageMetadata:
    metadata = pb.SingleMessageMetadata(payload_size=0)
    if sequence_id is not None:
        metadata.sequence_id = sequence_id
    if key is not None:
        metadata.partition_key = key
    return metadata


def batch_metadata(
    count: int, sequence_id: int = 0, codec: int = pb.NONE, size: int = 0
) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=sequence_id, publish_time=1, num_messages_in_batch=count
    )
    if codec != pb.NONE:
        metadata.compression = codec  # type: ignore[assignment]
        metadata.uncompressed_size = size
    return metadata


def compressed_batch(
    messages: list[tuple[pb.SingleMessageMetadata, bytes]], codec: int, first_sequence_id: int = 0
) -> tuple[pb.MessageMetadata, bytes]:
    raw = make_batch(messages)
    return batch_metadata(len(messages), first_sequence_id, codec, len(raw)), compress(codec, raw)


# ---------------------------------------------------------------------------
# Compression
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", TEXT, bytes(range(256)) * 20])
def test_compress_then_decompress(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data), len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_compression_shrinks_repetitive_data(codec: int) -> None:
    assert len(compress(codec, TEXT)) < len(TEXT) // 4


def test_lz4_is_a_raw_block_without_size_prefix() -> None:
    ours = compress(pb.LZ4, TEXT)
    assert lz4.block.decompress(ours, uncompressed_size=len(TEXT)) == TEXT
    theirs = lz4.block.compress(TEXT, store_size=False)
    assert decompress(pb.LZ4, theirs, len(TEXT)) == TEXT


def test_zlib_carries_the_zlib_header() -> None:
    assert zlib.decompress(compress(pb.ZLIB, TEXT)) == TEXT
    assert decompress(pb.ZLIB, zlib.compress(TEXT), len(TEXT)) == TEXT


def test_zstd_is_a_zstd_frame() -> None:
    assert compress(pb.ZSTD, TEXT)[:4] == bytes.fromhex("28b52ffd")


def test_snappy_is_raw_with_a_varint_length() -> None:
    assert compress(pb.SNAPPY, b"abc") == b"\x03\x08abc"


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
@pytest.mark.parametrize("delta", [-1, 1, 1000])
def test_decompress_rejects_a_wrong_uncompressed_size(codec: int, delta: int) -> None:
    with pytest.raises(BatchError):
        decompress(codec, compress(codec, TEXT), len(TEXT) + delta)


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_decompress_rejects_garbage(codec: int) -> None:
    with pytest.raises(BatchError, match=pb.CompressionType.Name(codec)):
        decompress(codec, b"\xff\x00garbage\xff" * 3, 100)


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_decompress_rejects_a_truncated_payload(codec: int) -> None:
    with pytest.raises(BatchError):
        decompress(codec, compress(codec, TEXT)[:-4], len(TEXT))


def test_unknown_codec() -> None:
    with pytest.raises(BatchError, match="compression type 9"):
        decompress(9, b"abc", 3)
    with pytest.raises(BatchError, match="compression type 9"):
        compress(9, b"abc")


def test_size_cap_stops_a_forged_uncompressed_size() -> None:
    data = compress(pb.LZ4, TEXT)
    assert decompress(pb.LZ4, data, len(TEXT), max_size_bytes=len(TEXT)) == TEXT
    with pytest.raises(BatchError, match="outside"):
        decompress(pb.LZ4, data, 1 << 40, max_size_bytes=len(TEXT))
    with pytest.raises(BatchError, match="outside"):
        decompress(pb.LZ4, data, -1)


def test_batch_error_is_a_protocol_error() -> None:
    assert issubclass(BatchError, ProtocolError)


# ---------------------------------------------------------------------------
# Batch layout
# ---------------------------------------------------------------------------


def test_observed_batch_layout() -> None:
    # From the brief: a three-message C++ batch starts 00000008 | 12 02 'k0' 18 02 40 00 | 'm0'.
    payload = make_batch([(single(0, "k0"), b"m0"), (single(1, "k1"), b"m1"), (single(2, "k2"), b"m2")])
    assert payload[:14] == bytes.fromhex("00000008 12026b30 18024000 6d30")
    assert len(payload) == 3 * 14


def test_make_batch_sets_payload_size_without_touching_the_input() -> None:
    metadata = single(5)
    payload = make_batch([(metadata, b"hello")])
    assert metadata.payload_size == 0
    ((parsed, body),) = iter_batch(batch_metadata(1, 5), payload)
    assert parsed.payload_size == 5
    assert body == b"hello"


@pytest.mark.parametrize("codec", CODECS)
def test_iter_batch_with_every_codec(codec: int) -> None:
    messages = [(single(i, f"k{i}"), f"message {i}".encode() * (i + 1)) for i in range(5)]
    metadata, payload = compressed_batch(messages, codec)
    result = iter_batch(metadata, payload)
    assert [body for _, body in result] == [body for _, body in messages]
    assert [m.partition_key for m, _ in result] == [f"k{i}" for i in range(5)]
    assert [m.sequence_id for m, _ in result] == list(range(5))


def test_iter_batch_through_a_stored_entry() -> None:
    metadata, payload = compressed_batch([(single(7), b"a"), (single(8), b"bb")], pb.ZSTD, 7)
    parsed = parse_entry(make_entry(metadata, payload))
    assert [body for _, body in iter_batch(parsed.metadata, parsed.payload)] == [b"a", b"bb"]


def test_batch_detection_is_by_presence() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    assert not is_batch(metadata)
    metadata.num_messages_in_batch = 1
    assert is_batch(metadata)


def test_a_non_batch_is_refused() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    with pytest.raises(BatchError, match="not a batch"):
        iter_batch(metadata, b"x")


def test_an_empty_batch() -> None:
    assert iter_batch(batch_metadata(0), b"") == []


def test_negative_message_count() -> None:
    with pytest.raises(BatchError, match="negative"):
        iter_batch(batch_metadata(-1), b"")


def test_batch_shorter_than_announced() -> None:
    payload = make_batch([(single(0), b"a"), (single(1), b"b")])
    with pytest.raises(BatchError, match="message 2 is truncated"):
        iter_batch(batch_metadata(3), payload)


def test_batch_with_bytes_left_over() -> None:
    payload = make_batch([(single(0), b"a"), (single(1), b"b")])
    with pytest.raises(BatchError, match="left over"):
        iter_batch(batch_metadata(1), payload)


def test_single_metadata_overrunning_the_batch() -> None:
    with pytest.raises(BatchError, match="overruns"):
        iter_batch(batch_metadata(1), b"\x00\x00\x00\x40\x18\x01")


def test_payload_size_overrunning_the_batch() -> None:
    record = pb.SingleMessageMetadata(payload_size=50).SerializeToString()
    with pytest.raises(BatchError, match="payload_size 50"):
        iter_batch(batch_metadata(1), len(record).to_bytes(4, "big") + record + b"short")


def test_negative_payload_size() -> None:
    record = pb.SingleMessageMetadata(payload_size=-3).SerializeToString()
    with pytest.raises(BatchError, match="payload_size -3"):
        iter_batch(batch_metadata(1), len(record).to_bytes(4, "big") + record)


def test_single_metadata_without_payload_size() -> None:
    record = pb.SingleMessageMetadata(sequence_id=1).SerializePartialToString()
    with pytest.raises(BatchError, match="no payload_size"):
        iter_batch(batch_metadata(1), len(record).to_bytes(4, "big") + record)


def test_undecodable_single_metadata() -> None:
    with pytest.raises(BatchError, match="does not decode"):
        iter_batch(batch_metadata(1), b"\x00\x00\x00\x02\xff\xff")


def test_corrupt_compressed_batch() -> None:
    metadata, payload = compressed_batch([(single(0), TEXT)], pb.LZ4)
    with pytest.raises(BatchError):
        iter_batch(metadata, payload[: len(payload) // 2])


# ---------------------------------------------------------------------------
# Last sequence id (deduplication)
# ---------------------------------------------------------------------------


def test_last_sequence_id_of_a_single_message() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=42, publish_time=1)
    assert last_sequence_id(metadata, b"not a batch") == 42


def test_last_sequence_id_read_from_the_batch() -> None:
    messages = [(single(10), b"a"), (single(20), b"b"), (single(35), b"c")]
    metadata, payload = compressed_batch(messages, pb.NONE, first_sequence_id=10)
    assert last_sequence_id(metadata, payload) == 35


@pytest.mark.parametrize("codec", COMPRESSING_CODECS)
def test_last_sequence_id_of_a_compressed_batch(codec: int) -> None:
    messages = [(single(100 + i), b"m" * i) for i in range(4)]
    metadata, payload = compressed_batch(messages, codec, first_sequence_id=100)
    assert last_sequence_id(metadata, payload) == 103


def test_last_sequence_id_falls_back_to_the_count() -> None:
    messages = [(single(), b"a"), (single(), b"b"), (single(), b"c")]
    metadata, payload = compressed_batch(messages, pb.NONE, first_sequence_id=7)
    assert last_sequence_id(metadata, payload) == 9


def test_last_sequence_id_of_a_corrupt_batch() -> None:
    with pytest.raises(BatchError):
        last_sequence_id(batch_metadata(2), b"\x00\x00\x00")


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

single_metadata = st.builds(
    pb.SingleMessageMetadata,
    payload_size=st.just(0),
    partition_key=st.text(max_size=10),
    sequence_id=st.integers(0, (1 << 64) - 1),
    event_time=st.integers(0, (1 << 64) - 1),
    null_value=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(single_metadata, st.binary(max_size=200)), max_size=10),
    st.sampled_from(CODECS),
)
def test_make_batch_then_iter_batch(
    messages: list[tuple[pb.SingleMessageMetadata, bytes]], codec: int
) -> None:
    metadata, payload = compressed_batch(messages, codec)
    result = iter_batch(metadata, payload)
    assert [body for _, body in result] == [body for _, body in messages]
    for (parsed, body), (given_metadata, _) in zip(result, messages, strict=True):
        expected = pb.SingleMessageMetadata()
        expected.CopyFrom(given_metadata)
        expected.payload_size = len(body)
        assert parsed == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 5), st.sampled_from(CODECS), st.integers(0, 400))
def test_garbage_batches_raise_only_batch_errors(garbage: bytes, count: int, codec: int, size: int) -> None:
    try:
        iter_batch(batch_metadata(count, codec=codec, size=size), garbage)
    except BatchError:
        pass


@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 2**40)), st.binary(max_size=40)), min_size=1,
                max_size=20),
       st.integers(0, 200))
def test_last_sequence_id_agrees_with_the_full_parse(records: list[tuple[int | None, bytes]], cut: int) -> None:
    """The fast walk over record metadata finds the same last id as decoding every message, and
    refuses exactly the payloads the full parse refuses."""
    messages = [(single(seq), body) for seq, body in records]
    metadata, payload = compressed_batch(messages, pb.NONE, first_sequence_id=3)
    for candidate in (payload, payload[: max(0, len(payload) - cut)]):
        try:
            parsed = iter_batch(metadata, candidate)
        except BatchError:
            with pytest.raises(BatchError):
                last_sequence_id(metadata, candidate)
            continue
        last = parsed[-1][0]
        expected = last.sequence_id if last.HasField("sequence_id") else 3 + len(parsed) - 1
        assert last_sequence_id(metadata, candidate) == expected
