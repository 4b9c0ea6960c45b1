"""Batch payloads and payload compression.

When MessageMetadata *has* ``num_messages_in_batch`` (presence, not value), the
payload, once decompressed, is that many records back to back::

    [singleMetadataSize:4][SingleMessageMetadata][payload_size bytes]

The broker never rewrites payloads; it reads batches only to learn what the
batch metadata does not say (the last sequence id, per-message keys).
Compression covers the whole payload: LZ4 as a raw block, ZLIB with its zlib
header, ZSTD frames and raw Snappy, as Pulsar's ``CompressionCodec*`` classes
write them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam
from google.protobuf.message import DecodeError

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import ProtocolError

_U32 = struct.Struct(">I")
_parse_single = pb.SingleMessageMetadata.FromString


class BatchError(ProtocolError):
    """A batch payload, or a compressed payload, that cannot be read."""


_Compress = Callable[[bytes], cramjam.Buffer]
_DecompressInto = Callable[[bytes, bytearray], int]

_COMPRESSORS: dict[int, _Compress] = {
    pb.LZ4: lambda data: cramjam.lz4.compress_block(data, store_size=False),
    pb.ZLIB: cramjam.zlib.compress,
    pb.ZSTD: cramjam.zstd.compress,
    pb.SNAPPY: cramjam.snappy.compress_raw,
}

# Decompressing into a buffer of exactly the announced size makes the codec
# itself report a payload that is larger, and the count it returns one that
# is smaller, so a lying uncompressed_size never goes unnoticed.
_DECOMPRESSORS_INTO: dict[int, _DecompressInto] = {
    pb.LZ4: cramjam.lz4.decompress_block_into,
    pb.ZLIB: cramjam.zlib.decompress_into,
    pb.ZSTD: cramjam.zstd.decompress_into,
    pb.SNAPPY: cramjam.snappy.decompress_raw_into,
}


def _codec_name(codec: int) -> str:
    try:
        return str(pb.CompressionType.Name(codec))
    except ValueError:
        return f"compression type {codec}"


def compress(codec: int, data: bytes) -> bytes:
    """Compress a whole payload the way Pulsar producers do."""
    if codec == pb.NONE:
        return bytes(data)
    compressor = _COMPRESSORS.get(codec)
    if compressor is None:
        raise BatchError(f"unsupported {_codec_name(codec)}")
    return bytes(compressor(bytes(data)))


def decompress(codec: int, data: bytes, uncompressed_size: int, max_size_bytes: int | None = None) -> bytes:
    """Decompress a whole payload; the result must be exactly ``uncompressed_size``.

    ``max_size_bytes`` caps what a payload may claim to expand to, so a forged
    ``uncompressed_size`` cannot make the broker allocate without bound.
    """
    if codec == pb.NONE:
        return bytes(data)
    decompress_into = _DECOMPRESSORS_INTO.get(codec)
    if decompress_into is None:
        raise BatchError(f"unsupported {_codec_name(codec)}")
    if uncompressed_size < 0 or (max_size_bytes is not None and uncompressed_size > max_size_bytes):
        raise BatchError(f"uncompressed_size {uncompressed_size} is outside 0..{max_size_bytes}")
    output = bytearray(uncompressed_size)
    try:
        written = decompress_into(bytes(data), output)
    except cramjam.DecompressionError as error:
        raise BatchError(f"{_codec_name(codec)} payload does not decompress: {error}") from error
    if written != uncompressed_size:
        raise BatchError(
            f"{_codec_name(codec)} payload decompresses to {written} bytes, "
            f"metadata says uncompressed_size {uncompressed_size}"
        )
    return bytes(output)


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """Clients treat a payload as a batch iff this field is present."""
    return bool(metadata.HasField("num_messages_in_batch"))


def iter_batch(
    metadata: pb.MessageMetadata, payload: bytes | memoryview
) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """The messages of a batch entry, decompressing the payload first."""
    if not is_batch(metadata):
        raise BatchError("entry is not a batch: its metadata has no num_messages_in_batch")
    count = metadata.num_messages_in_batch
    if count < 0:
        raise BatchError(f"num_messages_in_batch is negative ({count})")
    data = decompress(metadata.compression, bytes(payload), metadata.uncompressed_size)
    messages: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    offset = 0
    for index in range(count):
        single, body, offset = _read_record(data, offset, index)
        messages.append((single, body))
    if offset != len(data):
        raise BatchError(f"batch of {count} messages has {len(data) - offset} bytes left over")
    return messages


def _read_record(data: bytes, offset: int, index: int) -> tuple[pb.SingleMessageMetadata, bytes, int]:
    if offset + _U32.size > len(data):
        raise BatchError(f"batch message {index} is truncated before its metadata size")
    metadata_size = _U32.unpack_from(data, offset)[0]
    metadata_start = offset + _U32.size
    payload_start = metadata_start + metadata_size
    if payload_start > len(data):
        raise BatchError(f"batch message {index} metadata of {metadata_size} bytes overruns the batch")
    single = pb.SingleMessageMetadata()
    try:
        single.ParseFromString(data[metadata_start:payload_start])
    except DecodeError as error:
        raise BatchError(f"batch message {index} metadata does not decode: {error}") from error
    if not single.HasField("payload_size"):
        raise BatchError(f"batch message {index} metadata has no payload_size")
    payload_end = payload_start + single.payload_size
    if single.payload_size < 0 or payload_end > len(data):
        raise BatchError(f"batch message {index} payload_size {single.payload_size} overruns the batch")
    return single, data[payload_start:payload_end], payload_end


def make_batch(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """An uncompressed batch payload; each payload_size is set from its payload."""
    parts: list[bytes] = []
    for single, payload in messages:
        record = pb.SingleMessageMetadata()
        record.CopyFrom(single)
        record.payload_size = len(payload)
        encoded = record.SerializeToString()
        parts += (_U32.pack(len(encoded)), encoded, bytes(payload))
    return b"".join(parts)


def last_sequence_id(metadata: pb.MessageMetadata, payload: bytes | memoryview) -> int:
    """Sequence id of the last message in an entry (the entry's own for a non-batch).

    Deduplication asks this of every batch published, so only each record's metadata is
    decoded, from a view, to find where the next one starts; no payload is copied.
    """
    if not is_batch(metadata):
        return metadata.sequence_id
    count = metadata.num_messages_in_batch
    if count < 0:
        raise BatchError(f"num_messages_in_batch is negative ({count})")
    if count == 0:
        return metadata.sequence_id - 1
    data = payload
    if metadata.compression:
        data = decompress(metadata.compression, bytes(payload), metadata.uncompressed_size)
    last = _last_record_metadata(memoryview(data), count)
    if last.HasField("sequence_id"):
        return last.sequence_id
    return metadata.sequence_id + count - 1


def _last_record_metadata(view: memoryview, count: int) -> pb.SingleMessageMetadata:
    offset, end = 0, len(view)
    single = pb.SingleMessageMetadata()
    for index in range(count):
        if offset + _U32.size > end:
            raise BatchError(f"batch message {index} is truncated before its metadata size")
        start = offset + _U32.size
        stop = start + _U32.unpack_from(view, offset)[0]
        if stop > end:
            raise BatchError(f"batch message {index} metadata of {stop - start} bytes overruns the batch")
        try:
            single = _parse_single(view[start:stop])
        except DecodeError as error:
            raise BatchError(f"batch message {index} metadata does not decode: {error}") from error
        if not single.HasField("payload_size"):
            raise BatchError(f"batch message {index} metadata has no payload_size")
        offset = stop + single.payload_size
        if single.payload_size < 0 or offset > end:
            raise BatchError(f"batch message {index} payload_size {single.payload_size} overruns the batch")
    if offset != end:
        raise BatchError(f"batch of {count} messages has {end - offset} bytes left over")
    return single
