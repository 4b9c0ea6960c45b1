"""The Pulsar binary protocol, bytes in and bytes out; no knowledge of topics.

- ``pulsar_api_pb2``  bindings generated from ``proto/PulsarApi.proto``
                      (``scripts/generate_proto.py``); import it as ``pb``.
- ``frames``          frame decoding and encoding, CRC-32C, stored entries.
- ``batch``           batch payloads and payload compression.
- ``commands``        builders for every command the broker sends.

Nothing here does I/O, reads a clock or draws random numbers.
"""

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import BatchError
from magnetar.wire.frames import (
    FRAME_PADDING,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    ParsedEntry,
    ProtocolError,
    crc32c,
    encode_command,
    encode_payload_command,
    make_entry,
    parse_entry,
    payload_frame_header,
    peek_metadata,
    split_broker_entry_metadata,
    verify_entry_checksum,
)

__all__ = [
    "FRAME_PADDING",
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "BatchError",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "MalformedFrame",
    "ParsedEntry",
    "ProtocolError",
    "crc32c",
    "encode_command",
    "encode_payload_command",
    "make_entry",
    "parse_entry",
    "payload_frame_header",
    "pb",
    "peek_metadata",
    "split_broker_entry_metadata",
    "verify_entry_checksum",
]
