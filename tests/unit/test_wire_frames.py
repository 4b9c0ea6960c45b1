"""Frames, checksums and stored entries (magnetar.wire.frames)."""

from __future__ import annotations

import ast
import struct
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import magnetar.wire
from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import (
    FRAME_PADDING,
    LARGE_FRAME_BYTES,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
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

LIMIT = 5 * 1024 * 1024 + FRAME_PADDING

PING_FRAME = bytes.fromhex("00000009 00000005 08129201 00")
PONG_FRAME = bytes.fromhex("00000009 00000005 08139a01 00")
CONNECTED_FRAME = bytes.fromhex("00000012 0000000e 08031a0a 0a016d10 14188080 c002")
SEND_FRAME = bytes.fromhex(
    "00000023 00000008 08063204 08001000 0e010beb fb7f0000 000c0a01 70100018 80d095ff bc3178"
)
SEND_ENTRY = SEND_FRAME[16:]


def send_command(producer_id: int = 0, sequence_id: int = 0) -> pb.BaseCommand:
    body = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    return pb.BaseCommand(type=pb.BaseCommand.SEND, send=body)


def example_metadata() -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1700000000000)


def raw_frame(command_bytes: bytes, extra: bytes = b"") -> bytes:
    total = 4 + len(command_bytes) + len(extra)
    return struct.pack(">II", total, len(command_bytes)) + command_bytes + extra


def feed_in_pieces(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[Frame]:
    frames: list[Frame] = []
    start = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        frames += decoder.feed(data[start:cut])
        start = cut
    return frames


# ---------------------------------------------------------------------------
# Constants and CRC-32C
# ---------------------------------------------------------------------------


def test_constants_match_the_protocol() -> None:
    assert (MAGIC_CRC32C, MAGIC_BROKER_ENTRY_METADATA, FRAME_PADDING) == (0x0E01, 0x0E02, 10240)


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_crc32c_accepts_any_bytes_like(wrap: type) -> None:
    assert crc32c(wrap(b"123456789")) == 0xE3069283


def test_crc32c_of_empty_input_is_zero() -> None:
    assert crc32c(b"") == 0


# ---------------------------------------------------------------------------
# Worked examples of the protocol brief
# ---------------------------------------------------------------------------


def test_ping_and_pong_bytes() -> None:
    assert encode_command(commands.ping()) == PING_FRAME
    assert encode_command(commands.pong()) == PONG_FRAME


def test_connected_bytes() -> None:
    assert encode_command(commands.connected("m", 20, 5242880)) == CONNECTED_FRAME


def test_send_frame_bytes_and_checksum() -> None:
    entry = make_entry(example_metadata(), b"x")
    assert encode_payload_command(send_command(), entry) == SEND_FRAME
    assert entry[2:6] == bytes.fromhex("0bebfb7f")
    assert parse_entry(entry).checksum == 0x0BEBFB7F


def test_decoding_the_worked_examples() -> None:
    frames = FrameDecoder(LIMIT).feed(PING_FRAME + PONG_FRAME + CONNECTED_FRAME + SEND_FRAME)
    assert [f.command.type for f in frames] == [
        pb.BaseCommand.PING,
        pb.BaseCommand.PONG,
        pb.BaseCommand.CONNECTED,
        pb.BaseCommand.SEND,
    ]
    assert frames[0].command.HasField("ping") and frames[0].entry is None
    assert frames[2].command.connected.server_version == "m"
    assert frames[2].command.connected.max_message_size == 5242880
    assert frames[3].entry == SEND_ENTRY


def test_send_entry_is_kept_verbatim_and_parses() -> None:
    (frame,) = FrameDecoder(LIMIT).feed(SEND_FRAME)
    assert frame.entry == SEND_ENTRY
    parsed = parse_entry(SEND_ENTRY)
    assert parsed.metadata == example_metadata()
    assert bytes(parsed.payload) == b"x"
    assert verify_entry_checksum(SEND_ENTRY) is True


# ---------------------------------------------------------------------------
# Incremental decoding
# ---------------------------------------------------------------------------


def test_feeding_byte_by_byte() -> None:
    decoder = FrameDecoder(LIMIT)
    stream = SEND_FRAME + PING_FRAME + SEND_FRAME
    frames: list[Frame] = []
    completed_at: list[int] = []
    for index in range(len(stream)):
        new = decoder.feed(stream[index : index + 1])
        frames += new
        completed_at += [index + 1] * len(new)
    assert completed_at == [len(SEND_FRAME), len(SEND_FRAME) + len(PING_FRAME), len(stream)]
    assert [f.entry for f in frames] == [SEND_ENTRY, None, SEND_ENTRY]
    assert decoder.buffered_bytes == 0


def test_partial_frame_is_buffered_until_complete() -> None:
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(PING_FRAME + PONG_FRAME[:5]) == [Frame(commands.ping())]
    assert decoder.buffered_bytes == 5
    assert decoder.feed(PONG_FRAME[5:]) == [Frame(commands.pong())]
    assert decoder.buffered_bytes == 0


def test_empty_feed_returns_nothing() -> None:
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(b"") == []
    assert decoder.feed(PING_FRAME[:3]) == []
    assert decoder.feed(b"") == []
    assert decoder.feed(PING_FRAME[3:]) == [Frame(commands.ping())]


@pytest.mark.parametrize("wrap", [bytearray, memoryview])
def test_feed_accepts_other_bytes_like_input(wrap: type) -> None:
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(wrap(SEND_FRAME[:10])) == []
    assert decoder.feed(wrap(SEND_FRAME[10:] + PING_FRAME)) == [
        Frame(send_command(), SEND_ENTRY),
        Frame(commands.ping()),
    ]


def test_many_small_frames_in_one_read() -> None:
    frames = FrameDecoder(LIMIT).feed(PING_FRAME * 10_000)
    assert len(frames) == 10_000
    assert all(f.command.type == pb.BaseCommand.PING for f in frames)


def test_large_frame_in_small_pieces_is_linear() -> None:
    entry = make_entry(example_metadata(), bytes(range(256)) * 32 * 1024)  # 8 MiB payload
    frame = encode_payload_command(send_command(), entry)
    decoder = FrameDecoder(len(frame))
    started = time.perf_counter()
    frames: list[Frame] = []
    for offset in range(0, len(frame), 512):
        frames += decoder.feed(frame[offset : offset + 512])
    elapsed_s = time.perf_counter() - started
    assert frames == [Frame(send_command(), entry)]
    # Re-copying the buffered prefix on every piece would move ~64 GiB here.
    assert elapsed_s < 3.0


def test_a_large_frame_across_reads_is_joined_from_its_pieces() -> None:
    entry = make_entry(example_metadata(), b"y" * 200_000)
    frame = encode_payload_command(send_command(), entry)
    stream = PING_FRAME + frame + PONG_FRAME + frame[:100]
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(stream[:1000]) == [Frame(commands.ping())]
    assert decoder.buffered_bytes == 1000 - len(PING_FRAME)
    assert decoder.feed(stream[1000:150_000]) == []
    assert decoder.buffered_bytes == 150_000 - len(PING_FRAME)
    # the read that completes it brings the next frame and the start of another
    assert decoder.feed(stream[150_000:]) == [Frame(send_command(), entry), Frame(commands.pong())]
    assert decoder.buffered_bytes == 100
    assert decoder.feed(frame[100:]) == [Frame(send_command(), entry)]
    assert decoder.buffered_bytes == 0


def test_a_large_frame_whose_command_is_split_waits_for_it_whole() -> None:
    entry = make_entry(example_metadata(), b"z" * 100_000)
    frame = encode_payload_command(send_command(), entry)
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(frame[:3]) == []
    assert decoder.feed(frame[3:10]) == []
    assert decoder.feed(frame[10:70_000]) == []
    assert decoder.feed(frame[70_000:]) == [Frame(send_command(), entry)]


def test_a_large_simple_command_across_reads_is_malformed() -> None:
    body = PING_FRAME[8:]
    stream = raw_frame(body, b"p" * 100_000)
    decoder = FrameDecoder(LIMIT, large_frame_bytes=1000)
    assert decoder.feed(stream[:5000]) == []
    with pytest.raises(MalformedFrame, match="PING frame has 100000 bytes after the command"):
        decoder.feed(stream[5000:])
    with pytest.raises(MalformedFrame):
        decoder.feed(PING_FRAME)


# ---------------------------------------------------------------------------
# Size limit
# ---------------------------------------------------------------------------


def test_oversized_length_header_fails_before_the_body_arrives() -> None:
    decoder = FrameDecoder(1000)
    with pytest.raises(FrameTooLarge) as raised:
        decoder.feed(struct.pack(">I", 5_000_000))
    assert raised.value.size_bytes == 5_000_004
    assert raised.value.limit_bytes == 1000
    assert "5000004" in str(raised.value) and "1000" in str(raised.value)


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    frame = encode_payload_command(send_command(), make_entry(example_metadata(), b"y" * 100))
    assert len(FrameDecoder(len(frame)).feed(frame)) == 1
    with pytest.raises(FrameTooLarge):
        FrameDecoder(len(frame) - 1).feed(frame)


def test_default_limit_is_max_message_size_plus_padding() -> None:
    payload = b"z" * (5 * 1024 * 1024)
    frame = encode_payload_command(send_command(), make_entry(example_metadata(), payload))
    assert len(FrameDecoder(LIMIT).feed(frame)) == 1


def test_limit_must_leave_room_for_the_sizes() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(7)


# ---------------------------------------------------------------------------
# Malformed input
# ---------------------------------------------------------------------------


def test_total_size_too_small_for_a_command_size() -> None:
    with pytest.raises(MalformedFrame, match="totalSize"):
        FrameDecoder(LIMIT).feed(bytes.fromhex("00000002 0000"))


def test_command_size_beyond_total_size() -> None:
    with pytest.raises(MalformedFrame, match="cmdSize"):
        FrameDecoder(LIMIT).feed(bytes.fromhex("00000006 00000009 0812"))


def test_undecodable_command() -> None:
    with pytest.raises(MalformedFrame, match="cannot decode"):
        FrameDecoder(LIMIT).feed(raw_frame(b"\xff\xff\xff\xff"))


def test_command_without_type() -> None:
    empty_ping = pb.BaseCommand(ping=pb.CommandPing()).SerializePartialToString()
    with pytest.raises(MalformedFrame, match="no known type"):
        FrameDecoder(LIMIT).feed(raw_frame(empty_ping))


def test_command_with_unknown_type() -> None:
    with pytest.raises(MalformedFrame, match="no known type"):
        FrameDecoder(LIMIT).feed(raw_frame(b"\x08\x2d"))  # type 45 does not exist


def test_empty_command() -> None:
    with pytest.raises(MalformedFrame):
        FrameDecoder(LIMIT).feed(raw_frame(b""))


def test_bytes_after_a_simple_command() -> None:
    with pytest.raises(MalformedFrame, match="PING frame has 3 bytes after the command"):
        FrameDecoder(LIMIT).feed(raw_frame(PING_FRAME[8:], b"abc"))


def test_error_reports_the_frames_decoded_before_it() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(MalformedFrame) as raised:
        decoder.feed(PING_FRAME + SEND_FRAME + raw_frame(b"\x08\x2d"))
    assert [f.command.type for f in raised.value.frames_before] == [
        pb.BaseCommand.PING,
        pb.BaseCommand.SEND,
    ]


def test_decoder_refuses_input_after_an_error() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(MalformedFrame):
        decoder.feed(raw_frame(b"\x08\x2d"))
    with pytest.raises(MalformedFrame):
        decoder.feed(PING_FRAME)


def test_a_payload_frame_may_be_decoded_with_an_empty_entry() -> None:
    (frame,) = FrameDecoder(LIMIT).feed(encode_command(send_command()))
    assert frame.entry == b""


# ---------------------------------------------------------------------------
# Payload frames and broker entry metadata
# ---------------------------------------------------------------------------


def test_payload_header_plus_entry_is_the_whole_frame() -> None:
    command = commands.message(3, 7, 9, -1)
    bem = pb.BrokerEntryMetadata(broker_timestamp=5, index=41).SerializeToString()
    header = payload_frame_header(command, len(SEND_ENTRY), bem)
    assert header + SEND_ENTRY == encode_payload_command(command, SEND_ENTRY, bem)


def test_message_frame_with_broker_entry_metadata() -> None:
    command = commands.message(3, 7, 9, -1)
    bem = pb.BrokerEntryMetadata(broker_timestamp=1700000000123, index=41)
    frame = encode_payload_command(command, SEND_ENTRY, bem.SerializeToString())
    (decoded,) = FrameDecoder(LIMIT).feed(frame)
    assert decoded.command == command
    assert decoded.entry is not None
    assert decoded.entry[:2] == b"\x0e\x02"
    found, entry = split_broker_entry_metadata(decoded.entry)
    assert found == bem
    assert entry == SEND_ENTRY
    assert parse_entry(decoded.entry).metadata == example_metadata()
    assert verify_entry_checksum(decoded.entry) is True


def test_split_without_broker_entry_metadata() -> None:
    assert split_broker_entry_metadata(SEND_ENTRY) == (None, SEND_ENTRY)


def test_overrunning_broker_entry_metadata() -> None:
    with pytest.raises(MalformedFrame, match="broker entry metadata"):
        parse_entry(b"\x0e\x02\x00\x00\x01\x00" + SEND_ENTRY)


# ---------------------------------------------------------------------------
# Entries
# ---------------------------------------------------------------------------


def test_entry_without_checksum() -> None:
    entry = make_entry(example_metadata(), b"hello", with_checksum=False)
    assert entry[:4] == struct.pack(">I", len(example_metadata().SerializeToString()))
    parsed = parse_entry(entry)
    assert parsed.checksum is None
    assert bytes(parsed.payload) == b"hello"
    assert verify_entry_checksum(entry) is None


def test_corruption_fails_the_checksum() -> None:
    entry = bytearray(make_entry(example_metadata(), b"hello"))
    entry[-1] ^= 0x01
    assert verify_entry_checksum(bytes(entry)) is False
    assert bytes(parse_entry(bytes(entry)).payload) == b"helln"


def test_a_wrong_stored_checksum_fails() -> None:
    entry = bytearray(SEND_ENTRY)
    entry[5] ^= 0x80
    assert verify_entry_checksum(bytes(entry)) is False


def test_peek_metadata() -> None:
    metadata = example_metadata()
    metadata.partition_key = "k"
    metadata.num_messages_in_batch = 3
    peeked = peek_metadata(make_entry(metadata, b"payload"))
    assert peeked == metadata
    assert peeked.HasField("num_messages_in_batch")
    assert not peek_metadata(SEND_ENTRY).HasField("num_messages_in_batch")


def test_empty_payload() -> None:
    parsed = parse_entry(make_entry(example_metadata(), b""))
    assert bytes(parsed.payload) == b""


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00\x00",
        b"\x0e\x01\x00\x00",  # magic, truncated checksum
        b"\x0e\x01\x00\x00\x00\x00",  # checksum, no metadata size
        b"\x00\x00\x00\x10abc",  # metadata size beyond the entry
        b"\x00\x00\x00\x02\xff\xff",  # undecodable metadata
        b"\x0e\x02\x00",  # broker entry metadata magic, truncated size
        b"\x00\x00\x00\x00payload",  # metadata without its required fields
        b"\x00\x00\x00\x03\x0a\x01p",  # only producer_name
    ],
)
def test_garbage_entries_are_malformed(garbage: bytes) -> None:
    with pytest.raises(MalformedFrame):
        parse_entry(garbage)


def test_missing_required_metadata_fields_are_named() -> None:
    partial = pb.MessageMetadata(producer_name="p").SerializePartialToString()
    entry = len(partial).to_bytes(4, "big") + partial
    with pytest.raises(MalformedFrame, match="sequence_id, publish_time"):
        peek_metadata(entry)


def test_truncated_checksum_is_malformed_when_verifying() -> None:
    with pytest.raises(MalformedFrame):
        verify_entry_checksum(b"\x0e\x01\x00")


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

uint64s = st.integers(min_value=0, max_value=(1 << 64) - 1)
longs = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
texts = st.text(max_size=20)


@st.composite
def metadata_values(draw: st.DrawFn) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(
        producer_name=draw(texts), sequence_id=draw(uint64s), publish_time=draw(uint64s)
    )
    if draw(st.booleans()):
        metadata.partition_key = draw(texts)
    if draw(st.booleans()):
        metadata.num_messages_in_batch = draw(st.integers(min_value=1, max_value=1000))
    if draw(st.booleans()):
        metadata.deliver_at_time = draw(longs)
    for key, value in draw(st.lists(st.tuples(texts, texts), max_size=3)):
        metadata.properties.add(key=key, value=value)
    return metadata


@st.composite
def frames(draw: st.DrawFn) -> tuple[pb.BaseCommand, bytes | None]:
    kind = draw(st.sampled_from(["ping", "pong", "send", "message", "error", "flow", "subscribe"]))
    if kind == "ping":
        return commands.ping(), None
    if kind == "pong":
        return commands.pong(), None
    if kind == "error":
        return commands.error(draw(uint64s), pb.ServiceNotReady, draw(texts)), None
    if kind == "flow":
        body = pb.CommandFlow(consumer_id=draw(uint64s), messagePermits=draw(st.integers(0, 2**32 - 1)))
        return pb.BaseCommand(type=pb.BaseCommand.FLOW, flow=body), None
    if kind == "subscribe":
        body = pb.CommandSubscribe(
            topic=draw(texts),
            subscription=draw(texts),
            subType=pb.CommandSubscribe.Key_Shared,
            consumer_id=draw(uint64s),
            request_id=draw(uint64s),
            keySharedMeta=pb.KeySharedMeta(keySharedMode=pb.STICKY, hashRanges=[pb.IntRange(start=0, end=9)]),
        )
        return pb.BaseCommand(type=pb.BaseCommand.SUBSCRIBE, subscribe=body), None
    entry = make_entry(draw(metadata_values()), draw(st.binary(max_size=300)), draw(st.booleans()))
    if kind == "send":
        return send_command(draw(uint64s), draw(uint64s)), entry
    return commands.message(draw(uint64s), draw(longs), draw(longs), draw(st.integers(-1, 99))), entry


def encode(command: pb.BaseCommand, entry: bytes | None) -> bytes:
    return encode_command(command) if entry is None else encode_payload_command(command, entry)


@pytest.mark.parametrize("large_frame_bytes", [LARGE_FRAME_BYTES, 1], ids=["usual", "every-frame-large"])
@settings(max_examples=200, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=12), st.data())
def test_encode_then_decode_at_any_split_points(
    large_frame_bytes: int, sent: list[tuple[pb.BaseCommand, bytes | None]], data: st.DataObject
) -> None:
    """With every frame large, each one that spans reads is joined from its pieces."""
    stream = b"".join(encode(command, entry) for command, entry in sent)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    decoder = FrameDecoder(LIMIT, large_frame_bytes)
    received = feed_in_pieces(decoder, stream, cuts)
    assert received == [Frame(command, entry) for command, entry in sent]
    assert decoder.buffered_bytes == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_garbage_in_pieces_raises_only_protocol_errors(garbage: bytes, cuts: list[int]) -> None:
    try:
        feed_in_pieces(FrameDecoder(1000, large_frame_bytes=1), garbage, cuts)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(metadata_values(), st.binary(max_size=2000), st.booleans())
def test_make_entry_and_parse_entry_are_inverse(
    metadata: pb.MessageMetadata, payload: bytes, with_checksum: bool
) -> None:
    entry = make_entry(metadata, payload, with_checksum)
    parsed = parse_entry(entry)
    assert parsed.metadata == metadata
    assert bytes(parsed.payload) == payload
    assert (parsed.checksum is not None) == with_checksum
    assert verify_entry_checksum(entry) is (True if with_checksum else None)
    assert peek_metadata(entry) == metadata


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_streams_raise_only_protocol_errors(garbage: bytes) -> None:
    try:
        FrameDecoder(1000).feed(garbage)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_entries_raise_only_malformed_frame(garbage: bytes) -> None:
    try:
        parse_entry(garbage)
        verify_entry_checksum(garbage)
        split_broker_entry_metadata(garbage)
    except MalformedFrame:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=500), st.integers(min_value=0), st.integers(0, 7))
def test_any_flipped_bit_fails_the_checksum(payload: bytes, position: int, bit: int) -> None:
    entry = bytearray(make_entry(example_metadata(), payload))
    index = 6 + position % (len(entry) - 6)
    entry[index] ^= 1 << bit
    assert verify_entry_checksum(bytes(entry)) is False


# ---------------------------------------------------------------------------
# Layering
# ---------------------------------------------------------------------------

FORBIDDEN_IMPORTS = {"asyncio", "socket", "threading", "time", "random"}


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_wire_does_no_io_and_reads_no_clock() -> None:
    package = Path(magnetar.wire.__file__).parent
    sources = sorted(package.rglob("*.py"))
    assert len(sources) >= 4
    for source in sources:
        assert not imported_roots(source.read_text()) & FORBIDDEN_IMPORTS, source.name
