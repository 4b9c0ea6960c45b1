"""The frames the broker sends once per message, encoded without protobuf objects.

A SEND_RECEIPT per published entry and a MESSAGE header per dispatched entry are most
of what the broker writes. Building a ``BaseCommand`` and serializing it costs several
microseconds each in Python; these encoders write the same bytes directly (field keys
come from the generated descriptors, so a field renumbering cannot slip by), and
``tests/unit/test_wire_hot_commands.py`` checks them byte for byte against protobuf.
Anything unusual (an ack set, an epoch) goes through :mod:`magnetar.wire.commands`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from magnetar.wire import commands
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import payload_frame_header

_SIZES = struct.Struct(">II")
_U64 = (1 << 64) - 1
_WIRE_VARINT, _WIRE_LEN = 0, 2


def _key(descriptor: object, name: str, wire_type: int) -> bytes:
    number = descriptor.fields_by_name[name].number  # type: ignore[attr-defined]
    return varint(number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: the varints of small values (ids, counts, entry ids of a young ledger), precomputed
_SMALL = tuple(_varint(i) for i in range(1 << 14))


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative value below 2**64."""
    if value < 0x4000:
        return _SMALL[value]
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    return _varint(value)


_BASE = pb.BaseCommand.DESCRIPTOR
_ID = pb.MessageIdData.DESCRIPTOR
_RECEIPT = pb.CommandSendReceipt.DESCRIPTOR
_MESSAGE = pb.CommandMessage.DESCRIPTOR

_TYPE_RECEIPT = _key(_BASE, "type", _WIRE_VARINT) + varint(pb.BaseCommand.SEND_RECEIPT)
_TYPE_MESSAGE = _key(_BASE, "type", _WIRE_VARINT) + varint(pb.BaseCommand.MESSAGE)
_K_RECEIPT = _key(_BASE, "send_receipt", _WIRE_LEN)
_K_MESSAGE = _key(_BASE, "message", _WIRE_LEN)
_K_LEDGER = _key(_ID, "ledgerId", _WIRE_VARINT)
_K_ENTRY = _key(_ID, "entryId", _WIRE_VARINT)
_K_PARTITION = _key(_ID, "partition", _WIRE_VARINT)
_K_PRODUCER_ID = _key(_RECEIPT, "producer_id", _WIRE_VARINT)
_K_SEQUENCE_ID = _key(_RECEIPT, "sequence_id", _WIRE_VARINT)
_K_RECEIPT_ID = _key(_RECEIPT, "message_id", _WIRE_LEN)
_K_HIGHEST = _key(_RECEIPT, "highest_sequence_id", _WIRE_VARINT)
_K_CONSUMER_ID = _key(_MESSAGE, "consumer_id", _WIRE_VARINT)
_K_MESSAGE_ID = _key(_MESSAGE, "message_id", _WIRE_LEN)
_K_REDELIVERY = _key(_MESSAGE, "redelivery_count", _WIRE_VARINT)
_RECEIPT_HEAD = _TYPE_RECEIPT + _K_RECEIPT


#: the bytes of a message id before its entry id, by ledger (a few ledgers are live at a time)
_LEDGER_PREFIXES: dict[int, bytes] = {}
#: the partition field, by partition (-1 for a topic that is not partitioned: ten bytes)
_PARTITION_FIELDS: dict[int, bytes] = {}
_CACHED_MAX = 4096


def _message_id(ledger_id: int, entry_id: int, partition: int | None) -> bytes:
    prefix = _LEDGER_PREFIXES.get(ledger_id)
    if prefix is None:
        if len(_LEDGER_PREFIXES) >= _CACHED_MAX:
            _LEDGER_PREFIXES.clear()
        prefix = _LEDGER_PREFIXES[ledger_id] = _K_LEDGER + varint(ledger_id & _U64) + _K_ENTRY
    if partition is None:
        return prefix + varint(entry_id & _U64)
    suffix = _PARTITION_FIELDS.get(partition)
    if suffix is None:
        if len(_PARTITION_FIELDS) >= _CACHED_MAX:
            _PARTITION_FIELDS.clear()
        suffix = _PARTITION_FIELDS[partition] = _K_PARTITION + varint(partition & _U64)
    return prefix + varint(entry_id & _U64) + suffix


def send_receipt_frame(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int,
                       highest_sequence_id: int) -> bytes:
    """The SEND_RECEIPT frame :func:`magnetar.wire.commands.send_receipt` would give."""
    return send_receipt_frames(producer_id, ((sequence_id, highest_sequence_id, (ledger_id, entry_id)),))


def send_receipt_frames(producer_id: int, receipts: Iterable[tuple[int, int, tuple[int, int]]]) -> bytes:
    """One producer's SEND_RECEIPT frames, back to back: (sequence id, highest sequence id,
    (ledger id, entry id)) each."""
    head = _K_PRODUCER_ID + varint(producer_id & _U64) + _K_SEQUENCE_ID
    frames: list[bytes] = []
    for sequence_id, highest, (ledger_id, entry_id) in receipts:
        mid = _message_id(ledger_id, entry_id, None)
        receipt = b"".join((head, varint(sequence_id & _U64), _K_RECEIPT_ID, varint(len(mid)), mid,
                            _K_HIGHEST, varint(highest & _U64)))
        body = _RECEIPT_HEAD + varint(len(receipt)) + receipt
        frames += (_SIZES.pack(4 + len(body), len(body)), body)
    return b"".join(frames)


def message_frame_header(consumer_id: int, ledger_id: int, entry_id: int, partition: int,
                         redelivery_count: int, ack_set: list[int] | None, entry_size: int) -> bytes:
    """Everything of a MESSAGE frame before the stored entry."""
    if ack_set is not None or not 0 <= redelivery_count < 1 << 32:
        return payload_frame_header(commands.message(consumer_id, ledger_id, entry_id, partition,
                                                     redelivery_count, ack_set), entry_size)
    mid = _message_id(ledger_id, entry_id, partition)
    message = _K_CONSUMER_ID + varint(consumer_id & _U64) + _K_MESSAGE_ID + varint(len(mid)) + mid
    if redelivery_count:
        message += _K_REDELIVERY + varint(redelivery_count)
    body = _TYPE_MESSAGE + _K_MESSAGE + varint(len(message)) + message
    return _SIZES.pack(4 + len(body) + entry_size, len(body)) + body


__all__ = ["message_frame_header", "send_receipt_frame", "send_receipt_frames", "varint"]
