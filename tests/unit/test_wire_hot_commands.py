"""The hand-encoded SEND_RECEIPT and MESSAGE frames equal protobuf's, byte for byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.wire import commands
from magnetar.wire.frames import encode_command, payload_frame_header
from magnetar.wire.hot_commands import message_frame_header, send_receipt_frame, send_receipt_frames, varint

U64 = st.integers(0, (1 << 64) - 1)
LONG = st.integers(-(1 << 63), (1 << 63) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


@given(U64, U64, LONG, LONG, U64)
def test_send_receipt_frame_is_protobufs(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                                         highest: int) -> None:
    expected = encode_command(commands.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest))
    assert send_receipt_frame(producer_id, sequence_id, ledger_id, entry_id, highest) == expected


@given(U64, st.lists(st.tuples(U64, U64, st.tuples(LONG, LONG)), max_size=5))
def test_send_receipt_frames_are_protobufs_back_to_back(producer_id: int,
                                                        receipts: list[tuple[int, int, tuple[int, int]]]) -> None:
    expected = b"".join(encode_command(commands.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest))
                        for sequence_id, highest, (ledger_id, entry_id) in receipts)
    assert send_receipt_frames(producer_id, receipts) == expected


@given(U64, LONG, LONG, INT32, st.integers(0, (1 << 32) - 1), st.integers(0, 10_000_000))
def test_message_frame_header_is_protobufs(consumer_id: int, ledger_id: int, entry_id: int, partition: int,
                                           redelivery_count: int, entry_size: int) -> None:
    expected = payload_frame_header(
        commands.message(consumer_id, ledger_id, entry_id, partition, redelivery_count, None), entry_size)
    assert message_frame_header(consumer_id, ledger_id, entry_id, partition, redelivery_count, None,
                                entry_size) == expected


@given(st.lists(LONG, min_size=1, max_size=4))
def test_a_message_with_an_ack_set_takes_the_protobuf_path(ack_set: list[int]) -> None:
    expected = payload_frame_header(commands.message(7, 3, 4, -1, 2, ack_set), 100)
    assert message_frame_header(7, 3, 4, -1, 2, ack_set, 100) == expected


def test_varint_edges() -> None:
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(128) == b"\x80\x01"
    assert varint((1 << 64) - 1) == b"\xff" * 9 + b"\x01"
