"""Deduplication by a message property within a time window (a Magnetar extension).

Pulsar's deduplication follows a producer's sequence ids, so it cannot catch a
retry that a non-replayable source sends as a brand-new message, nor a business
id seen twice (the limits seed 002 points out). This window remembers the values
of one message property (``__dedup_id`` unless configured otherwise) per topic and
drops a message whose value was already stored within ``window_ms``.

Memory is bounded by ``max_ids``: each remembered id is held as a 16-byte BLAKE2b
digest of its value plus its first-seen time in an insertion-ordered dict, whatever
the id's length. In CPython 3.11 that costs about 200 bytes per id and never more
than :data:`BYTES_PER_ID_MAX` (320, just after the dict grows), plus up to
:data:`BYTES_PER_PENDING_ID_MAX` (128) for each id whose write is still in flight.
So a window costs at most ``320 * max_ids`` bytes plus ``128`` per write in flight
(32 MB for 100,000 ids). When the bound is reached the oldest id is forgotten
early, which shortens the effective window; ``evicted_over_bound`` counts it. Two
different ids share a digest with negligible probability (2**-64 for a billion ids).

An id is *pending* from :meth:`PropertyDedupWindow.check_and_record` until the
shell reports the write durable (:meth:`PropertyDedupWindow.on_persisted`) or
failed (:meth:`PropertyDedupWindow.on_write_failed`, which forgets it so the retry
is stored). Snapshots hold durable ids only. To recover, :meth:`restore` the last
snapshot and feed each entry stored after the snapshot's position through
:meth:`PropertyDedupWindow.record_persisted`.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from dataclasses import dataclass

#: The message property read by default.
DEFAULT_PROPERTY_NAME = "__dedup_id"
#: Upper bound on the memory one remembered id costs, in bytes (CPython 3.11, measured).
BYTES_PER_ID_MAX = 320
#: Extra bytes for an id whose write is still in flight.
BYTES_PER_PENDING_ID_MAX = 128

_DIGEST_SIZE = 16
_MAGIC = b"MGDW"
_VERSION = 1
_HEADER = struct.Struct(">4sBI")
_RECORD = struct.Struct(f">{_DIGEST_SIZE}sq")


def _digest(dedup_id: str | bytes) -> bytes:
    raw = dedup_id.encode("utf-8") if isinstance(dedup_id, str) else dedup_id
    return hashlib.blake2b(raw, digest_size=_DIGEST_SIZE).digest()


@dataclass(frozen=True, slots=True)
class PropertyDedupStats:
    """What topic stats show of the window."""

    property_name: str
    window_ms: int
    ids: int
    max_ids: int
    #: First-seen time (epoch ms) of the oldest remembered id; None when empty.
    oldest_ms: int | None
    duplicates_dropped: int
    evicted_over_bound: int


class PropertyDedupWindow:
    """The ids of one topic seen within ``window_ms``, at most ``max_ids`` of them."""

    def __init__(self, window_ms: int, max_ids: int, property_name: str = DEFAULT_PROPERTY_NAME) -> None:
        if window_ms <= 0:
            raise ValueError(f"deduplication window must be > 0 ms, got {window_ms}")
        if max_ids <= 0:
            raise ValueError(f"deduplication window must hold > 0 ids, got {max_ids}")
        if not property_name:
            raise ValueError("deduplication property name must not be empty")
        self._window_ms = window_ms
        self._max_ids = max_ids
        self._property_name = property_name
        # digest -> first-seen ms; insertion order is first-seen order.
        self._seen: OrderedDict[bytes, int] = OrderedDict()
        self._pending: set[bytes] = set()
        self._latest_ms = 0
        self._duplicates_dropped = 0
        self._evicted_over_bound = 0

    @property
    def property_name(self) -> str:
        return self._property_name

    @property
    def window_ms(self) -> int:
        return self._window_ms

    @property
    def max_ids(self) -> int:
        return self._max_ids

    def __len__(self) -> int:
        return len(self._seen)

    def check_and_record(self, dedup_id: str | bytes, now_ms: int) -> bool:
        """True if ``dedup_id`` was seen within the window (drop the message); else remember it.

        A duplicate of an id whose write is still in flight is reported too; the shell
        can tell with :meth:`is_pending` and answer with a retryable error instead.
        """
        key = _digest(dedup_id)
        now_ms = self._expire(now_ms)
        if key in self._seen:
            self._duplicates_dropped += 1
            return True
        self._insert(key, now_ms)
        self._pending.add(key)
        return False

    def is_pending(self, dedup_id: str | bytes) -> bool:
        """The id was recorded but its write has not been reported durable yet."""
        return _digest(dedup_id) in self._pending

    def on_persisted(self, dedup_id: str | bytes) -> None:
        """The message carrying ``dedup_id`` is durable."""
        self._pending.discard(_digest(dedup_id))

    def on_write_failed(self, dedup_id: str | bytes) -> None:
        """The write failed: forget the id so that a retry is stored."""
        key = _digest(dedup_id)
        if key in self._pending:
            self._pending.discard(key)
            self._seen.pop(key, None)

    def record_persisted(self, dedup_id: str | bytes, seen_ms: int) -> None:
        """Remember a durable id read back from the log during recovery."""
        key = _digest(dedup_id)
        seen_ms = self._expire(seen_ms)
        if key not in self._seen:
            self._insert(key, seen_ms)

    def expire(self, now_ms: int) -> None:
        """Forget ids older than the window."""
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> int:
        # Time never runs backwards inside the window, so first-seen order stays time order.
        now_ms = max(now_ms, self._latest_ms)
        self._latest_ms = now_ms
        cutoff_ms = now_ms - self._window_ms
        while self._seen:
            key, seen_ms = next(iter(self._seen.items()))
            if seen_ms > cutoff_ms:
                break
            self._forget_oldest()
        return now_ms

    def _insert(self, key: bytes, seen_ms: int) -> None:
        while len(self._seen) >= self._max_ids:
            self._forget_oldest()
            self._evicted_over_bound += 1
        self._seen[key] = seen_ms

    def _forget_oldest(self) -> None:
        key, _ = self._seen.popitem(last=False)
        self._pending.discard(key)

    # -- persistence --------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The durable ids and their first-seen times, oldest first, as bytes to store."""
        records = [(k, t) for k, t in self._seen.items() if k not in self._pending]
        parts = [_HEADER.pack(_MAGIC, _VERSION, len(records))]
        parts.extend(_RECORD.pack(key, seen_ms) for key, seen_ms in records)
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        """Replace the remembered ids by those of a :meth:`snapshot`.

        The current ``window_ms`` and ``max_ids`` apply: if the bound shrank, the newest
        ids are kept; expired ids go at the next call that carries the time.
        """
        records = _decode(data)
        records.sort(key=lambda record: record[1])
        self._seen.clear()
        self._pending.clear()
        self._latest_ms = 0
        for key, seen_ms in records[-self._max_ids :]:
            self._seen[key] = seen_ms
            self._latest_ms = max(self._latest_ms, seen_ms)

    def stats(self) -> PropertyDedupStats:
        oldest_ms = next(iter(self._seen.values())) if self._seen else None
        return PropertyDedupStats(
            property_name=self._property_name,
            window_ms=self._window_ms,
            ids=len(self._seen),
            max_ids=self._max_ids,
            oldest_ms=oldest_ms,
            duplicates_dropped=self._duplicates_dropped,
            evicted_over_bound=self._evicted_over_bound,
        )


def _decode(data: bytes) -> list[tuple[bytes, int]]:
    if len(data) < _HEADER.size:
        raise ValueError(f"deduplication window snapshot is truncated: {len(data)} bytes")
    magic, version, count = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _VERSION:
        raise ValueError(f"not a deduplication window snapshot (magic {magic!r}, version {version})")
    expected = _HEADER.size + count * _RECORD.size
    if len(data) != expected:
        raise ValueError(f"deduplication window snapshot holds {len(data)} bytes, expected {expected}")
    return [_RECORD.unpack_from(data, _HEADER.size + i * _RECORD.size) for i in range(count)]
