"""What dispatch needs to know about a stored entry, read from its MessageMetadata.

The broker never parses payloads, only metadata: how many messages an entry holds
(permits are counted in messages), when it may be delivered, its sticky key, and
whether it is an internal marker that clients must never see.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import peek_metadata


@dataclass(frozen=True, slots=True)
class EntryInfo:
    num_messages: int
    publish_time_ms: int
    deliver_at_ms: int | None
    is_marker: bool
    metadata: pb.MessageMetadata

    @classmethod
    def of(cls, metadata: pb.MessageMetadata) -> EntryInfo:
        return cls(
            num_messages=metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1,
            publish_time_ms=metadata.publish_time,
            deliver_at_ms=metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None,
            is_marker=metadata.HasField("marker_type"),
            metadata=metadata,
        )

    @classmethod
    def read(cls, entry: bytes) -> EntryInfo:
        return cls.of(peek_metadata(entry))


def unacked_in_ack_set(ack_set: list[int] | None, num_messages: int) -> int:
    """Messages of a batch still to deliver: set bits of the ack set (all when absent)."""
    if not ack_set:
        return num_messages
    return sum(bin(word & 0xFFFFFFFFFFFFFFFF).count("1") for word in ack_set)
