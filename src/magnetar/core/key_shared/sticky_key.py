"""Sticky keys and their hashes: which bytes of a message decide its Key_Shared consumer.

Mirrors Pulsar 4.x ``Commands.resolveStickyKey`` (the key) and
``StickyKeyConsumerSelectorUtils.makeStickyKeyHash`` (the hash). The broker computes
the hash, never the client, so it must be the one Java uses: STICKY consumers declare
ranges of it (shared/reference/protocol.md §7).
"""

from __future__ import annotations

import base64
import binascii

import mmh3

from magnetar.wire import pulsar_api_pb2 as pb

#: The key of a message whose metadata could not be read at all.
NONE_KEY = b"NONE_KEY"
#: Size of the sticky key hash space; hashes are folded into 0..65535.
HASH_RANGE_SIZE = 1 << 16
#: Largest sticky key hash.
MAX_STICKY_KEY_HASH = HASH_RANGE_SIZE - 1
#: Hash value reserved to mean "not set" inside the dispatcher; never produced.
STICKY_KEY_HASH_NOT_SET = 0


#: an entry's metadata, or one message's within a batch: both carry the key fields
KeyedMetadata = pb.MessageMetadata | pb.SingleMessageMetadata


def sticky_key(metadata: KeyedMetadata | None) -> bytes:
    """The sticky key of an entry, from its (batch) MessageMetadata.

    Ordering key if set, else the partition key (base64-decoded when the producer
    flagged it so), else ``producer_name-sequence_id`` so keyless messages spread
    across consumers as in Pulsar 4.x. Only missing metadata gives ``NONE_KEY``.
    """
    if metadata is None:
        return NONE_KEY
    if metadata.HasField("ordering_key"):
        return bytes(metadata.ordering_key)
    if metadata.HasField("partition_key"):
        key: str = metadata.partition_key
        if metadata.partition_key_b64_encoded:
            try:
                # Java's decoder does not insist on '=' padding; Python's does.
                return base64.b64decode(key + "=" * (-len(key) % 4), validate=True)
            except (binascii.Error, ValueError):
                # Java's decoder would throw and the entry would get NONE_KEY; raw bytes
                # keep such messages together instead of lumping them with all others.
                return key.encode("utf-8")
        return key.encode("utf-8")
    if isinstance(metadata, pb.MessageMetadata) and metadata.HasField("producer_name") \
            and metadata.HasField("sequence_id"):
        return f"{metadata.producer_name}-{metadata.sequence_id}".encode()
    return NONE_KEY


def murmur3_32(key: bytes) -> int:
    """Pulsar's ``Murmur3_32Hash``: MurmurHash3 x86_32, seed 0, sign bit cleared."""
    return mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF


def sticky_key_hash(key: bytes) -> int:
    """The slot of a sticky key in 1..65535: murmur3 mod 65536, with 0 moved to 1."""
    slot = murmur3_32(key) % HASH_RANGE_SIZE
    return slot if slot != STICKY_KEY_HASH_NOT_SET else STICKY_KEY_HASH_NOT_SET + 1
