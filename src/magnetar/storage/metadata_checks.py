"""Checks and encodings every metadata store shares: Pulsar's rules for names, the JSON and
integer checks that give bad input a clear :class:`InvalidMetadata`, and the persisted form
of a cursor's individually deleted ranges."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from typing import Any

from magnetar.core.metadata.records import InvalidMetadata, MetadataError, SchemaRecord
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord

# Pulsar's rule for tenant, namespace and cluster names (NamedEntity.checkName).
_NAME = re.compile(r"[-=:.\w]+", re.ASCII)
_TOPIC = re.compile(r"(?:persistent|non-persistent)://([^/]+)/([^/]+)/([^\x00]+)", re.DOTALL)
#: a partition's suffix, stripped to name its partitioned topic
PARTITION_SUFFIX = re.compile(r"-partition-\d+$")


# -- persisted form of individually deleted ranges --------------------------------------

_RANGES_V1 = 1
_RANGES_HEAD = struct.Struct(">BI")


def encode_ranges(ranges: Iterable[tuple[Position, Position]]) -> bytes:
    """``u8 version (1) | u32 count | count x (lower ledger, lower entry, upper ledger,
    upper entry) as i64``, big-endian. Ranges may span ledgers.

    Raises :class:`InvalidMetadata` for anything but ordered pairs of int64 positions.
    """
    flat: list[int] = []
    try:
        for (lower_ledger, lower_entry), (upper_ledger, upper_entry) in ranges:
            if (lower_ledger, lower_entry) > (upper_ledger, upper_entry):
                raise InvalidMetadata(
                    f"invalid acknowledged range ({lower_ledger}:{lower_entry}, "
                    f"{upper_ledger}:{upper_entry}): lower bound above upper"
                )
            flat += (lower_ledger, lower_entry, upper_ledger, upper_entry)
        body = struct.pack(f">{len(flat)}q", *flat)
    except InvalidMetadata:
        raise
    except (TypeError, ValueError, struct.error) as exc:
        raise InvalidMetadata(f"invalid acknowledged ranges: expected (Position, Position) pairs ({exc})") from None
    return _RANGES_HEAD.pack(_RANGES_V1, len(flat) // 4) + body


def decode_ranges(blob: bytes) -> list[tuple[Position, Position]]:
    """Inverse of :func:`encode_ranges`; a damaged blob raises rather than reading as empty."""
    if len(blob) < _RANGES_HEAD.size:
        raise MetadataError(f"acknowledged-ranges record too short ({len(blob)} bytes)")
    version, count = _RANGES_HEAD.unpack_from(blob)
    if version != _RANGES_V1 or len(blob) != _RANGES_HEAD.size + 32 * count:
        raise MetadataError(
            f"acknowledged-ranges record is damaged or of an unknown version "
            f"(version {version}, {count} ranges, {len(blob)} bytes)"
        )
    numbers = iter(struct.unpack_from(f">{4 * count}q", blob, _RANGES_HEAD.size))
    return [(Position(a, b), Position(c, d)) for a, b, c, d in zip(numbers, numbers, numbers, numbers, strict=True)]


# -- validation -------------------------------------------------------------------------


def check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidMetadata(f"invalid {kind} name {name!r}: use letters, digits and - = : . _")
    return name


def namespace_tenant(namespace: object) -> str:
    """Validate ``tenant/namespace`` and return the tenant."""
    parts = namespace.split("/") if isinstance(namespace, str) else []
    if len(parts) != 2:
        raise InvalidMetadata(f"invalid namespace {namespace!r}: expected 'tenant/namespace'")
    check_name("namespace", parts[1])
    return check_name("tenant", parts[0])


def topic_namespace(topic: object) -> str:
    """Validate a full topic name and return its ``tenant/namespace``."""
    match = _TOPIC.fullmatch(topic) if isinstance(topic, str) else None
    if match is None:
        raise InvalidMetadata(
            f"invalid topic name {topic!r}: expected '{{persistent|non-persistent}}://tenant/namespace/topic'"
        )
    namespace = f"{match[1]}/{match[2]}"
    namespace_tenant(namespace)
    return namespace


def check_text(kind: str, value: object) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected a non-empty string without NUL")
    return value


def check_int(kind: str, value: object, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected an integer{bound}")
    return value


def dump_json(kind: str, value: Any, *, object_only: bool = True) -> str:
    if object_only and not isinstance(value, dict):
        raise InvalidMetadata(f"{kind} must be a JSON object (dict), not {type(value).__name__}")
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMetadata(f"{kind} is not JSON-serializable: {exc}") from None


def check_position(kind: str, value: object) -> Position:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected a Position(ledger_id, entry_id)")
    return Position(check_int(kind, value[0]), check_int(kind, value[1]))


def split_topic(topic: object) -> tuple[str, str, str, str]:
    """Validate a full topic name: its domain, tenant, namespace and local name."""
    topic_namespace(topic)
    domain, rest = str(topic).split("://", 1)
    tenant, namespace, local = rest.split("/", 2)
    return domain, tenant, namespace, local


def check_cursor(topic: str, name: str, record: CursorRecord) -> tuple[Position, bytes, str]:
    """Validate a cursor record: its mark-delete position, encoded ranges and properties JSON."""
    topic_namespace(topic)
    check_text("cursor name", name)
    mark_delete = check_position("mark-delete position", record.mark_delete)
    ranges = encode_ranges(record.individually_deleted)
    for key, value in record.properties.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidMetadata(f"invalid cursor property {key!r}={value!r}: expected str -> int | str")
    check_int("last_active_ms", record.last_active_ms)
    return mark_delete, ranges, dump_json("cursor properties", record.properties)


def check_schema(topic: str, schema: SchemaRecord) -> str:
    """Validate a schema version; its properties as JSON."""
    topic_namespace(topic)
    check_text("schema type", schema.schema_type)
    if not isinstance(schema.data, bytes):
        raise InvalidMetadata(f"schema data must be bytes, not {type(schema.data).__name__}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in schema.properties.items()):
        raise InvalidMetadata("schema properties must map str to str")
    return dump_json("schema properties", schema.properties)


def check_bundle(namespace: str, bundle_range: str) -> str:
    """Validate ``tenant/ns`` and a bundle range ``0xXXXXXXXX_0xXXXXXXXX``; the range."""
    namespace_tenant(namespace)
    if not isinstance(bundle_range, str) or not _BUNDLE.fullmatch(bundle_range):
        raise InvalidMetadata(f"invalid bundle range {bundle_range!r}: expected 0xXXXXXXXX_0xXXXXXXXX")
    return bundle_range


def check_broker_id(broker_id: str) -> str:
    """Validate a broker id, ``host:port`` as Pulsar names brokers."""
    if not isinstance(broker_id, str) or not _BROKER_ID.fullmatch(broker_id):
        raise InvalidMetadata(f"invalid broker id {broker_id!r}: expected host:port")
    return broker_id


_BUNDLE = re.compile(r"0x[0-9a-f]{8}_0x[0-9a-f]{8}")
_BROKER_ID = re.compile(r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}")


def check_managed_ledger(topic: str, info: dict[str, Any]) -> str:
    """Validate a managed ledger record (``ManagedLedgerInfo`` JSON); it as JSON."""
    topic_namespace(topic)
    body = dump_json("managed ledger info", info)
    ledgers = info.get("ledgerInfo")
    if not isinstance(ledgers, list) or not all(
            isinstance(ledger, dict) and isinstance(ledger.get("ledgerId"), int) for ledger in ledgers):
        raise InvalidMetadata("managed ledger info needs ledgerInfo: a list of {\"ledgerId\": int, ...}")
    if "properties" in info:
        raise InvalidMetadata("managed ledger info may not hold properties: they are the topic's, "
                              "set with update_topic_properties")
    return body
