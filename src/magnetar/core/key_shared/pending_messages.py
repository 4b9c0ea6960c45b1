"""Which messages hold a sticky key: a consumer's pending messages with their keys and hashes.

PIP-379 leaves a hash draining at its old consumer until every message of it pending
there is acknowledged; when a key seems stuck, the user needs the exact message ids
that hold it. Pulsar only proposed this listing ("future improvement"); here it reads
each pending entry's metadata for its sticky key, so it works for every subscription
type, and filters by hash or key before anything is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from magnetar.core.key_shared.sticky_key import NONE_KEY, STICKY_KEY_HASH_NOT_SET, sticky_key, sticky_key_hash
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.wire.frames import ProtocolError, peek_metadata


@dataclass(frozen=True, slots=True)
class PendingMessage:
    position: Position
    batch_size: int
    sticky_key_hash: int
    key: bytes
    redelivery_count: int
    #: whether the hash is draining at this consumer, blocking its delivery to another
    draining: bool


@dataclass(frozen=True, slots=True)
class PendingFilter:
    sticky_key_hash: int | None = None
    key: bytes | None = None

    def matches(self, sticky_hash: int, key: bytes) -> bool:
        if self.sticky_key_hash is not None and sticky_hash != self.sticky_key_hash:
            return False
        return self.key is None or key == self.key


def _key_of(read_entry: Callable[[Position], bytes], pos: Position) -> bytes:
    try:
        return sticky_key(peek_metadata(read_entry(pos)))
    except (KeyError, ProtocolError):
        return NONE_KEY


def pending_messages(consumer: Consumer, read_entry: Callable[[Position], bytes],
                     redelivery_counts: dict[Position, int], is_draining: Callable[[int], bool],
                     wanted: PendingFilter = PendingFilter()) -> Iterator[PendingMessage]:
    """The consumer's pending messages in position order that match ``wanted``.

    A hash filter alone skips reading entries whose recorded hash differs (Key_Shared
    records the hash at dispatch); other subscription types record none, so their
    hash is computed from the key.
    """
    for pos in sorted(consumer.pending):
        entry = consumer.pending[pos]
        recorded = entry.sticky_hash
        if recorded != STICKY_KEY_HASH_NOT_SET and wanted.sticky_key_hash not in (None, recorded):
            continue
        key = _key_of(read_entry, pos)
        sticky_hash = recorded if recorded != STICKY_KEY_HASH_NOT_SET else sticky_key_hash(key)
        if wanted.matches(sticky_hash, key):
            yield PendingMessage(pos, entry.messages, sticky_hash, key, redelivery_counts.get(pos, 0),
                                 is_draining(sticky_hash))
