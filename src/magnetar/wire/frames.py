"""Pulsar frames: length-prefixed BaseCommands, optionally followed by an entry.

A simple frame is ``[totalSize][cmdSize][BaseCommand]`` with
``totalSize == 4 + cmdSize``. SEND and MESSAGE frames carry more after the
command: an optional broker entry metadata section (magic 0x0e02, MESSAGE only),
then the *entry* as the producer wrote it::

    [0x0e01][crc32c]  [metadataSize][MessageMetadata]  [payload]

The CRC-32C covers everything after the checksum field. The broker stores the
entry verbatim and replays it after each MESSAGE command, so this module hands
the entry bytes through untouched and only parses what the broker must read.
Counterparts in Pulsar: ``Commands`` and ``PulsarDecoder`` (Java),
``Commands.cc`` and ``ClientConnection::processIncomingBuffer`` (C++).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c
from google.protobuf.message import DecodeError, Message

from magnetar.wire import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
#: Room for the command and metadata on top of maxMessageSize (Java's
#: Commands.MESSAGE_SIZE_FRAME_PADDING): the frame limit is maxMessageSize + this.
FRAME_PADDING = 10240

#: Command types followed by an entry in the same frame.
PAYLOAD_COMMAND_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SIZES = struct.Struct(">II")
_MAGIC_AND_U32 = struct.Struct(">HI")
_CRC_PREFIX = MAGIC_CRC32C.to_bytes(2, "big")
#: where the metadata of an entry that starts with its checksum begins
_CRC_HEADER_END = _MAGIC_AND_U32.size + _U32.size
_LENGTH_FIELD_BYTES = 4
#: frames from this size on that span reads are joined once from their pieces
LARGE_FRAME_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The peer broke the framing or encoding rules; the stream cannot be trusted.

    ``frames_before`` holds the frames a decoder completed, in the same read,
    before it met the bad one, so a caller may still act on them.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.frames_before: list[Frame] = []


class FrameTooLarge(ProtocolError):
    """A frame announced more bytes than the connection accepts."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"frame of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes "
            f"(maxMessageSize + {FRAME_PADDING}); send smaller messages or enable chunking"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class MalformedFrame(ProtocolError):
    """Bytes that do not form a valid frame, command or entry."""


@dataclass
class Frame:
    """One decoded frame.

    ``entry`` is set for SEND and MESSAGE only: every byte after the command,
    exactly as received (for a SEND, what the broker stores as the ledger entry).
    """

    command: pb.BaseCommand
    entry: bytes | None = None


@dataclass
class ParsedEntry:
    """An entry split into its parts. ``checksum`` is the stored CRC, if any."""

    metadata: pb.MessageMetadata
    payload: memoryview | bytes
    checksum: int | None


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli), as Pulsar computes it over metadata and payload."""
    return int(google_crc32c.value(data if isinstance(data, bytes) else bytes(data)))


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


class FrameDecoder:
    """Incremental frame decoder: feed bytes as they arrive, get whole frames.

    ``max_frame_size`` bounds a whole frame including its 4-byte length field, as
    Java's frame decoder does (maxMessageSize + FRAME_PADDING). A length header
    over the limit fails at once, before any of the body is buffered.

    Partial input waits in one bytearray consumed from the front, so neither many
    small frames nor one large frame in many pieces costs quadratic copying. A frame
    of at least ``large_frame_bytes`` that spans reads is kept instead as the pieces
    that bring it, once its command has arrived, and joined once, straight into its
    entry: the bytes of a batch of a thousand messages are copied once, not three
    times (into the buffer, out of it, and the rest of the read moved to its front).
    After a ProtocolError the stream is out of step; the decoder then refuses all
    further input and the connection should be closed.
    """

    def __init__(self, max_frame_size: int, large_frame_bytes: int = LARGE_FRAME_BYTES) -> None:
        if max_frame_size < _SIZES.size:
            raise ValueError(f"max_frame_size must be at least {_SIZES.size}, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self.large_frame_bytes = large_frame_bytes
        self._pending = bytearray()
        #: the pieces of a large frame still arriving; the first holds its whole command
        self._pieces: list[bytes | bytearray | memoryview] = []
        #: bytes of that frame still to come
        self._missing = 0
        self._failure: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._pending) + sum(map(len, self._pieces))

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Consume ``data``; return the frames it completes, in order."""
        if self._failure is not None:
            raise self._failure
        if self._pieces:
            return self._feed_large(data if isinstance(data, bytes) else bytes(data))
        if self._pending:
            self._pending += data
            frames, consumed = self._decode_all(self._pending)
            del self._pending[:consumed]
            if self._pending and (missing := self._large_frame_missing(self._pending, 0)):
                self._pieces, self._missing, self._pending = [self._pending], missing, bytearray()
            return frames
        # Common case: nothing is waiting, so decode straight from the input.
        source = data if isinstance(data, bytes) else bytes(data)
        frames, consumed = self._decode_all(source)
        self._keep(source, consumed)
        return frames

    def _keep(self, source: bytes, consumed: int) -> None:
        """Hold what is left of ``source`` after ``consumed``: the start of a frame."""
        if consumed == len(source):
            return
        if missing := self._large_frame_missing(source, consumed):
            self._pieces, self._missing = [memoryview(source)[consumed:]], missing
        else:
            self._pending += memoryview(source)[consumed:]

    def _large_frame_missing(self, buffer: bytes | bytearray, offset: int) -> int:
        """For an incomplete frame at ``offset`` that is large and whose command has
        arrived, the bytes still missing; else 0. Its length was checked already."""
        available = len(buffer) - offset
        if available < _SIZES.size:
            return 0
        total_size, command_size = _SIZES.unpack_from(buffer, offset)
        frame_size: int = _LENGTH_FIELD_BYTES + total_size
        command_end = _SIZES.size + command_size
        if frame_size < self.large_frame_bytes or available < command_end or command_end > frame_size:
            return 0
        return frame_size - available

    def _feed_large(self, source: bytes) -> list[Frame]:
        if len(source) < self._missing:
            if source:
                self._pieces.append(source)
                self._missing -= len(source)
            return []
        taken = self._missing
        pieces, self._pieces, self._missing = self._pieces, [], 0
        pieces.append(memoryview(source)[:taken])
        try:
            frame = _decode_pieces(pieces)
        except ProtocolError as error:
            self._failure = error
            raise
        frames, consumed = self._decode_all(source, taken, [frame])
        self._keep(source, consumed)
        return frames

    def _decode_all(self, buffer: bytes | bytearray, offset: int = 0,
                    frames: list[Frame] | None = None) -> tuple[list[Frame], int]:
        """Decode the whole frames from ``offset`` on, after ``frames``; where they end."""
        frames = [] if frames is None else frames
        try:
            while (end := self._frame_end(buffer, offset)) is not None:
                frames.append(decode_frame(buffer, offset, end))
                offset = end
        except ProtocolError as error:
            error.frames_before = frames
            self._failure = error
            raise
        return frames, offset

    def _frame_end(self, buffer: bytes | bytearray, offset: int) -> int | None:
        """Where the frame starting at ``offset`` ends, or None if incomplete."""
        available = len(buffer) - offset
        if available < _LENGTH_FIELD_BYTES:
            return None
        total_size = _U32.unpack_from(buffer, offset)[0]
        frame_size = _LENGTH_FIELD_BYTES + total_size
        if frame_size > self.max_frame_size:
            raise FrameTooLarge(frame_size, self.max_frame_size)
        if total_size < _U32.size:
            raise MalformedFrame(f"frame totalSize {total_size} is too small to hold a command size")
        return offset + frame_size if available >= frame_size else None


def decode_frame(buffer: bytes | bytearray, start: int, end: int) -> Frame:
    """Decode the complete frame occupying ``buffer[start:end]``."""
    total_size, command_size = _SIZES.unpack_from(buffer, start)
    command_start = start + _SIZES.size
    command_end = command_start + command_size
    if command_end > end:
        raise MalformedFrame(f"cmdSize {command_size} exceeds totalSize {total_size} - 4")
    command = _parse_command(buffer[command_start:command_end])
    if command.type in PAYLOAD_COMMAND_TYPES:
        return Frame(command, _copy(buffer, command_end, end))
    if command_end != end:
        name = pb.BaseCommand.Type.Name(command.type)
        raise MalformedFrame(f"{name} frame has {end - command_end} bytes after the command")
    return Frame(command)


def _decode_pieces(pieces: list[bytes | bytearray | memoryview]) -> Frame:
    """Decode a large frame from the pieces that brought it; the first holds the sizes
    and the whole command (``FrameDecoder._large_frame_missing`` saw to it)."""
    head = pieces[0]
    total_size, command_size = _SIZES.unpack_from(head, 0)
    command_end = _SIZES.size + command_size
    command = _parse_command(bytes(head[_SIZES.size:command_end]))
    if command.type not in PAYLOAD_COMMAND_TYPES:
        name = pb.BaseCommand.Type.Name(command.type)
        raise MalformedFrame(f"{name} frame has {_LENGTH_FIELD_BYTES + total_size - command_end} bytes "
                             "after the command")
    pieces[0] = memoryview(head)[command_end:]
    return Frame(command, b"".join(pieces))


def _parse_command(data: bytes | bytearray) -> pb.BaseCommand:
    command = pb.BaseCommand()
    try:
        command.ParseFromString(data)
    except DecodeError as error:
        raise MalformedFrame(f"cannot decode BaseCommand: {error}") from error
    if not command.HasField("type"):
        raise MalformedFrame("BaseCommand has no known type")
    return command


def _copy(buffer: bytes | bytearray, start: int, end: int) -> bytes:
    if isinstance(buffer, bytes):
        return buffer[start:end]
    with memoryview(buffer) as view:
        return view[start:end].tobytes()


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def request_id_of(cmd: pb.BaseCommand) -> int | None:
    """The request id of any command that has one, by convention of the sub-message."""
    field = pb.BaseCommand.DESCRIPTOR.fields_by_number.get(cmd.type)
    if field is None or not cmd.HasField(field.name):
        return None
    sub = getattr(cmd, field.name)
    if "request_id" in sub.DESCRIPTOR.fields_by_name and sub.HasField("request_id"):
        return int(sub.request_id)
    return None


def encode_command(command: pb.BaseCommand) -> bytes:
    """A simple frame. Raises EncodeError if a required field is unset."""
    body: bytes = command.SerializeToString()
    return _SIZES.pack(_U32.size + len(body), len(body)) + body


def payload_frame_header(
    command: pb.BaseCommand, entry_size: int, broker_entry_metadata: bytes | None = None
) -> bytes:
    """Everything of a SEND/MESSAGE frame before the entry, for zero-copy writes."""
    body: bytes = command.SerializeToString()
    section = b""
    if broker_entry_metadata is not None:
        section = _MAGIC_AND_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(broker_entry_metadata))
        section += broker_entry_metadata
    total_size = _U32.size + len(body) + len(section) + entry_size
    return _SIZES.pack(total_size, len(body)) + body + section


def encode_payload_command(
    command: pb.BaseCommand, entry: bytes, broker_entry_metadata: bytes | None = None
) -> bytes:
    """A SEND/MESSAGE frame: command, optional broker entry metadata, stored entry."""
    return payload_frame_header(command, len(entry), broker_entry_metadata) + entry


# ---------------------------------------------------------------------------
# Entries: [0x0e01][crc32c] [metadataSize][MessageMetadata] [payload]
# ---------------------------------------------------------------------------


def make_entry(metadata: pb.MessageMetadata, payload: bytes, with_checksum: bool = True) -> bytes:
    """Serialize an entry the way producers do (the inverse of parse_entry)."""
    encoded: bytes = metadata.SerializeToString()
    body = _U32.pack(len(encoded)) + encoded + payload
    if not with_checksum:
        return body
    return _MAGIC_AND_U32.pack(MAGIC_CRC32C, crc32c(body)) + body


def parse_entry(entry: bytes) -> ParsedEntry:
    """Split an entry; a leading broker entry metadata section is skipped."""
    offset = _skip_broker_entry_metadata(entry)
    checksum, offset = _read_checksum(entry, offset)
    metadata, payload_offset = _read_metadata(entry, offset)
    return ParsedEntry(metadata, memoryview(entry)[payload_offset:], checksum)


def peek_metadata(entry: bytes) -> pb.MessageMetadata:
    """Only the MessageMetadata of an entry (the payload is not touched)."""
    offset = _skip_broker_entry_metadata(entry)
    _, offset = _read_checksum(entry, offset)
    return _read_metadata(entry, offset)[0]


def checked_metadata(entry: bytes) -> pb.MessageMetadata | None:
    """The entry's MessageMetadata once its CRC-32C (when it carries one) matched; None when
    it did not. One pass over the header for a published entry, which needs both."""
    if entry[:2] == _CRC_PREFIX and len(entry) >= _CRC_HEADER_END:
        # what clients send: checksum, then metadata; anything else, or anything wrong
        # with it, takes the general path, which says what is wrong
        if google_crc32c.value(entry[_MAGIC_AND_U32.size:]) != _U32.unpack_from(entry, 2)[0]:
            return None
        end = _CRC_HEADER_END + _U32.unpack_from(entry, _MAGIC_AND_U32.size)[0]
        if end <= len(entry):
            metadata = pb.MessageMetadata()
            try:
                metadata.ParseFromString(entry[_CRC_HEADER_END:end])
            except DecodeError:
                pass
            else:
                if metadata.IsInitialized():
                    return metadata
    offset = _skip_broker_entry_metadata(entry)
    checksum, covered_from = _read_checksum(entry, offset)
    if checksum is not None and crc32c(entry[covered_from:]) != checksum:
        return None
    return _read_metadata(entry, covered_from)[0]


def verify_entry_checksum(entry: bytes) -> bool | None:
    """Whether the stored CRC-32C matches; None when the entry carries none."""
    offset = _skip_broker_entry_metadata(entry)
    checksum, covered_from = _read_checksum(entry, offset)
    if checksum is None:
        return None
    return crc32c(entry[covered_from:]) == checksum


def split_broker_entry_metadata(data: bytes) -> tuple[pb.BrokerEntryMetadata | None, bytes]:
    """Separate a MESSAGE's broker entry metadata from the stored entry after it."""
    if not _has_magic(data, 0, MAGIC_BROKER_ENTRY_METADATA):
        return None, data
    offset = _skip_broker_entry_metadata(data)
    metadata = pb.BrokerEntryMetadata()
    _parse_into(metadata, memoryview(data)[_MAGIC_AND_U32.size : offset], "BrokerEntryMetadata")
    return metadata, data[offset:]


def _has_magic(data: bytes, offset: int, magic: int) -> bool:
    return len(data) >= offset + _U16.size and _U16.unpack_from(data, offset)[0] == magic


def _skip_broker_entry_metadata(data: bytes) -> int:
    if not _has_magic(data, 0, MAGIC_BROKER_ENTRY_METADATA):
        return 0
    size = _read_u32(data, _U16.size, "broker entry metadata size")
    end = _MAGIC_AND_U32.size + size
    if end > len(data):
        raise MalformedFrame(f"broker entry metadata of {size} bytes overruns the {len(data)}-byte frame")
    return end


def _read_checksum(entry: bytes, offset: int) -> tuple[int | None, int]:
    if not _has_magic(entry, offset, MAGIC_CRC32C):
        return None, offset
    return _read_u32(entry, offset + _U16.size, "checksum"), offset + _MAGIC_AND_U32.size


def _read_metadata(entry: bytes, offset: int) -> tuple[pb.MessageMetadata, int]:
    size = _read_u32(entry, offset, "metadata size")
    start = offset + _U32.size
    end = start + size
    if end > len(entry):
        raise MalformedFrame(f"metadata of {size} bytes overruns the {len(entry)}-byte entry")
    metadata = pb.MessageMetadata()
    _parse_into(metadata, memoryview(entry)[start:end], "MessageMetadata")
    if not metadata.IsInitialized():
        missing = ", ".join(metadata.FindInitializationErrors())
        raise MalformedFrame(f"MessageMetadata lacks required fields: {missing}")
    return metadata, end


def _read_u32(data: bytes, offset: int, what: str) -> int:
    if len(data) < offset + _U32.size:
        raise MalformedFrame(f"entry of {len(data)} bytes is too short to hold its {what}")
    return int(_U32.unpack_from(data, offset)[0])


def _parse_into(message: Message, data: memoryview, what: str) -> None:
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise MalformedFrame(f"cannot decode {what}: {error}") from error
