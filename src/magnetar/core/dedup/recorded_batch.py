"""A batch whose metadata understates its last sequence id, stored so that it does not.

Deduplication knows a stored entry by its metadata alone: ``highest_sequence_id`` when
set, else ``sequence_id + num_messages_in_batch - 1`` (:func:`magnetar.core.publish.
last_sequence_id`); recovery never reads a payload. The official clients send neither
``highest_sequence_id`` in a batch's metadata nor in its SEND, so a batch whose messages
carry ids that are not consecutive (explicit ids, e.g. every n-th row of a writer spread
over n partitions) would be recorded below its last message, and a producer resuming
from that id would send some of its messages a second time.

So when a topic deduplicates, a batch published without ``highest_sequence_id`` is read
once, as it arrives: if its last message's own ``sequence_id`` is above what the metadata
implies, the entry is stored with ``highest_sequence_id`` set to it (the checksum
recomputed), and deduplication, then and after any recovery, judges the batch by its last
message. Whatever cannot be read (encrypted, compressed with an unknown codec, claiming to
expand beyond ``max_bytes``, corrupt or cut short) is stored as sent and judged by its
metadata; nothing here raises.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import BatchError
from magnetar.wire.batch import last_sequence_id as last_message_sequence_id
from magnetar.wire.frames import ProtocolError, make_entry, parse_entry


def with_last_sequence_id(metadata: pb.MessageMetadata, entry: bytes, implied_last: int,
                          max_bytes: int) -> tuple[pb.MessageMetadata, bytes] | None:
    """The metadata and entry to store instead of ``entry`` when its last message's own id
    is above ``implied_last`` (what the metadata alone says); None to store it as sent."""
    if metadata.HasField("highest_sequence_id") or not metadata.HasField("num_messages_in_batch") \
            or metadata.encryption_keys or metadata.num_chunks_from_msg > 0 \
            or not 0 <= metadata.uncompressed_size <= max_bytes:
        return None
    try:
        parsed = parse_entry(entry)
        last = last_message_sequence_id(metadata, parsed.payload)
    except (BatchError, ProtocolError, DecodeError, ValueError):
        return None
    if last <= implied_last:
        return None
    recorded = pb.MessageMetadata()
    recorded.CopyFrom(metadata)
    recorded.highest_sequence_id = last
    return recorded, make_entry(recorded, bytes(parsed.payload), with_checksum=parsed.checksum is not None)
