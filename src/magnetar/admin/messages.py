"""Messages read over the admin API (peek, examine, get by id) as Pulsar returns them.

The body is the entry's payload, decompressed (a batch stays a batch: its
SingleMessageMetadata records are left for the client to split); the metadata goes
in ``X-Pulsar-*`` headers, with the names Pulsar's ``PersistentTopicsBase`` and the
admin clients use. Properties travel as one JSON object in ``X-Pulsar-PROPERTY``.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from fastapi.responses import Response

from magnetar.admin.errors import not_found
from magnetar.core.positions import Position
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import EntryNotFound
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import decompress
from magnetar.wire.frames import ProtocolError, parse_entry

#: The most a decompressed payload may grow to before it is returned compressed as stored.
MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
COMPRESSION_NAMES = {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}


def pulsar_date(ms: int) -> str:
    """Pulsar's ``DateFormatter``: Java's ``ISO_OFFSET_DATE_TIME`` (in UTC), which the Java admin
    client parses back: the fraction without trailing zeros (none at all on a whole second), ``Z``."""
    moment = datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC)
    fraction = f"{ms % 1000:03d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _safe(value: str) -> str:
    """Header values must be printable ASCII; anything else is percent-encoded."""
    if all(0x20 <= ord(ch) < 0x7F for ch in value):
        return value
    return quote(value, safe="")


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


#: optional metadata fields that are one header each when set, and how each is written
_FIELD_HEADERS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("highest_sequence_id", "X-Pulsar-highest-sequence-id", str),
    ("replicated_from", "X-Pulsar-replicated-from", _safe),
    ("ordering_key", "X-Pulsar-Base64-ordering-key", _b64),
    ("encryption_algo", "X-Pulsar-encryption-algo", _safe),
    ("marker_type", "X-Pulsar-marker-type", str),
    ("schema_version", "X-Pulsar-Base64-schema-version-b64encoded", _b64),
)


def metadata_headers(pos: Position, md: pb.MessageMetadata, payload_size: int) -> dict[str, str]:
    headers = {"X-Pulsar-Message-ID": str(pos)}
    if md.properties:
        headers["X-Pulsar-PROPERTY"] = json.dumps({kv.key: kv.value for kv in md.properties})
    if md.HasField("publish_time"):
        headers["X-Pulsar-publish-time"] = pulsar_date(md.publish_time)
    if md.HasField("event_time") and md.event_time:
        headers["X-Pulsar-event-time"] = pulsar_date(md.event_time)
    if md.HasField("deliver_at_time"):
        headers["X-Pulsar-deliver-at-time"] = pulsar_date(md.deliver_at_time)
    if md.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(payload_size)
    if md.HasField("null_value") and md.null_value:
        headers["X-Pulsar-null-value"] = "true"
    headers["X-Pulsar-producer-name"] = _safe(md.producer_name)
    headers["X-Pulsar-sequence-id"] = str(md.sequence_id)
    for field, header, text in _FIELD_HEADERS:
        if md.HasField(field):
            headers[header] = text(getattr(md, field))
    if md.HasField("partition_key"):
        _partition_key(headers, md)
    if md.compression:
        headers["X-Pulsar-compression"] = COMPRESSION_NAMES.get(md.compression, str(md.compression))
        headers["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if md.HasField("txnid_least_bits"):
        headers["X-Pulsar-txnid-least-bits"] = str(md.txnid_least_bits)
        headers["X-Pulsar-txnid-most-bits"] = str(md.txnid_most_bits)
    if md.HasField("uuid"):
        headers["X-Pulsar-uuid"] = _safe(md.uuid)
        headers["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        headers["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
        headers["X-Pulsar-chunk-id"] = str(md.chunk_id)
    return headers


def _partition_key(headers: dict[str, str], md: pb.MessageMetadata) -> None:
    key = md.partition_key
    encoded = md.partition_key_b64_encoded
    if _safe(key) != key:
        key, encoded = base64.b64encode(key.encode()).decode(), True
    headers["X-Pulsar-partition-key"] = key
    if encoded:
        headers["X-Pulsar-partition-key-b64-encoded"] = "true"


def entry_response(topic: Topic, pos: Position) -> Response:
    """The entry at ``pos`` as Pulsar's admin API returns a message."""
    try:
        entry = topic.read_entry(pos)
        parsed = parse_entry(entry)
    except (EntryNotFound, KeyError):
        raise not_found(f"Message not found: no entry {pos} on {topic.name}") from None
    except ProtocolError as exc:
        raise not_found(f"Entry {pos} on {topic.name} cannot be read as a message: {exc}") from None
    md = parsed.metadata
    payload = bytes(parsed.payload)
    if md.compression and not md.encryption_keys:
        try:
            payload = decompress(md.compression, payload, md.uncompressed_size, MAX_UNCOMPRESSED_BYTES)
        except ProtocolError:
            pass
    return Response(payload, media_type="application/octet-stream",
                    headers=metadata_headers(pos, md, len(payload)))


def positions_after(topic: Topic, start: Position) -> Iterator[Position]:
    """Readable positions after ``start``, in order."""
    last = topic.last_readable()
    pos = start
    while last is not None and pos < last:
        pos = topic.next_position(pos)
        if pos > last:
            return
        yield pos


def nth_unacked(topic: Topic, mark_delete: Position, is_acked: object, n: int) -> Position:
    """The ``n``-th (from 1) entry after the mark-delete position that is not acknowledged."""
    assert callable(is_acked)
    seen = 0
    for pos in positions_after(topic, mark_delete):
        if not is_acked(pos):
            seen += 1
            if seen == n:
                return pos
    raise not_found(f"Message not found: the subscription has only {seen} unacknowledged entries")


def nth_from(topic: Topic, initial_position: str, n: int) -> Position:
    """``examinemessage``: the n-th entry from the earliest (1 = first) or latest (1 = last)."""
    first = topic.ledger.first_position()
    last = topic.last_readable()
    if first is None or last is None or first > last:
        raise not_found(f"Message not found: topic {topic.name} has no messages")
    total = topic.entries_between(first, last)
    if n > total:
        raise not_found(f"Message not found: topic {topic.name} has only {total} entries")
    index = n - 1 if initial_position == "earliest" else total - n
    for i, pos in enumerate(positions_after(topic, topic.position_before(first))):
        if i == index:
            return pos
    raise not_found(f"Message not found at position {n}")
