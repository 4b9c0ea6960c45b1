"""Broker metadata in an embedded SQLite database (where Pulsar uses ZooKeeper or etcd).

Holds clusters, tenants, namespaces and their policies, partitioned-topic metadata,
created topics, cursor positions (Pulsar's ``ManagedCursorInfo``), schema versions
(Pulsar's ``SchemaRegistry``), the broker-wide ledger id counter, and a generic JSON
key-value space for everything else.

One connection, used from the owner thread (``sqlite3`` enforces it). The journal is a
WAL with ``synchronous=FULL``: every write is on disk when its method returns, which
cursor positions and the ledger id counter need. Each method is one statement or one
transaction, so a crash leaves every record either old or new, never half written.

A thread that must not wait for the disk (the broker's event loop) calls
:meth:`MetadataStore.defer_syncs`: its commits then reach the WAL without an fsync, and
become durable when some thread calls :meth:`MetadataStore.sync_log` (one fsync of the
WAL covers every commit before it, whichever connection made it).

:class:`MemoryMetadataStore` is the same class on an in-memory database, so the twin
behaves identically by construction.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord

#: Version of the tables below, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 2
#: The first ledger id a new store hands out.
FIRST_LEDGER_ID = 1

_TABLES = (
    "CREATE TABLE clusters (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    "CREATE TABLE tenants (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    "CREATE TABLE namespaces (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, policies TEXT NOT NULL)",
    "CREATE INDEX namespaces_by_tenant ON namespaces (tenant)",
    "CREATE TABLE partitioned_topics (topic TEXT PRIMARY KEY, namespace TEXT NOT NULL, partitions INTEGER NOT NULL)",
    "CREATE INDEX partitioned_topics_by_namespace ON partitioned_topics (namespace)",
    "CREATE TABLE topics (topic TEXT PRIMARY KEY, namespace TEXT NOT NULL, properties TEXT NOT NULL)",
    "CREATE INDEX topics_by_namespace ON topics (namespace)",
    "CREATE TABLE cursors (topic TEXT NOT NULL, name TEXT NOT NULL,"
    " mark_delete_ledger INTEGER NOT NULL, mark_delete_entry INTEGER NOT NULL,"
    " deleted_ranges BLOB NOT NULL, properties TEXT NOT NULL, last_active_ms INTEGER NOT NULL,"
    " PRIMARY KEY (topic, name))",
    "CREATE TABLE schemas (topic TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,"
    " data BLOB NOT NULL, properties TEXT NOT NULL, timestamp_ms INTEGER NOT NULL DEFAULT 0,"
    " deleted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (topic, version))",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
#: what brings a store of an older version to the next one, by the version it has
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE schemas ADD COLUMN timestamp_ms INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE schemas ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0"),
}

# Pulsar's rule for tenant, namespace and cluster names (NamedEntity.checkName).
_NAME = re.compile(r"[-=:.\w]+", re.ASCII)
_TOPIC = re.compile(r"(?:persistent|non-persistent)://([^/]+)/([^/]+)/([^\x00]+)", re.DOTALL)


__all__ = ["CursorRecord", "MetadataStore", "MemoryMetadataStore", "SchemaRecord"]


class MetadataError(Exception):
    """The metadata store could not do what was asked."""


class AlreadyExists(MetadataError):
    """A create found the record already there."""


class NotFound(MetadataError):
    """An update found no record to change."""


class InvalidMetadata(MetadataError, ValueError):
    """A name or value the store refuses; the message says which and why."""


@dataclass(frozen=True)
class SchemaRecord:
    """One version of a topic's schema (Pulsar's ``SchemaData``)."""

    #: Pulsar's schema type name, e.g. ``"AVRO"``, ``"JSON"``, ``"STRING"``.
    schema_type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    #: when the version was stored (ms since the epoch), as Pulsar's ``timestamp``
    timestamp_ms: int = 0
    #: a soft delete: the marker version Pulsar writes, after which older versions are gone
    deleted: bool = False


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


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidMetadata(f"invalid {kind} name {name!r}: use letters, digits and - = : . _")
    return name


def _namespace_tenant(namespace: object) -> str:
    """Validate ``tenant/namespace`` and return the tenant."""
    parts = namespace.split("/") if isinstance(namespace, str) else []
    if len(parts) != 2:
        raise InvalidMetadata(f"invalid namespace {namespace!r}: expected 'tenant/namespace'")
    _check_name("namespace", parts[1])
    return _check_name("tenant", parts[0])


def _topic_namespace(topic: object) -> str:
    """Validate a full topic name and return its ``tenant/namespace``."""
    match = _TOPIC.fullmatch(topic) if isinstance(topic, str) else None
    if match is None:
        raise InvalidMetadata(
            f"invalid topic name {topic!r}: expected '{{persistent|non-persistent}}://tenant/namespace/topic'"
        )
    namespace = f"{match[1]}/{match[2]}"
    _namespace_tenant(namespace)
    return namespace


def _check_text(kind: str, value: object) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected a non-empty string without NUL")
    return value


def _check_int(kind: str, value: object, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected an integer{bound}")
    return value


def _dump_json(kind: str, value: Any, *, object_only: bool = True) -> str:
    if object_only and not isinstance(value, dict):
        raise InvalidMetadata(f"{kind} must be a JSON object (dict), not {type(value).__name__}")
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMetadata(f"{kind} is not JSON-serializable: {exc}") from None


def _check_position(kind: str, value: object) -> Position:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InvalidMetadata(f"invalid {kind} {value!r}: expected a Position(ledger_id, entry_id)")
    return Position(_check_int(kind, value[0]), _check_int(kind, value[1]))


def _cursor_row(topic: str, name: str, record: CursorRecord) -> tuple[object, ...]:
    _topic_namespace(topic)
    _check_text("cursor name", name)
    mark_delete = _check_position("mark-delete position", record.mark_delete)
    ranges = encode_ranges(record.individually_deleted)
    for key, value in record.properties.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int | str):
            raise InvalidMetadata(f"invalid cursor property {key!r}={value!r}: expected str -> int | str")
    return (
        topic,
        name,
        mark_delete.ledger_id,
        mark_delete.entry_id,
        ranges,
        _dump_json("cursor properties", record.properties),
        _check_int("last_active_ms", record.last_active_ms),
    )


def _cursor_record(row: tuple[Any, ...]) -> CursorRecord:
    ledger_id, entry_id, ranges, properties, last_active_ms = row
    mark_delete = Position(ledger_id, entry_id)
    return CursorRecord(mark_delete, decode_ranges(ranges), json.loads(properties), last_active_ms)


#: key prefix of topic policies in the key-value table
TOPIC_POLICIES_PREFIX = "topic-policies/"
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")


class MetadataStore:
    """Broker metadata in a SQLite file; see the module docstring for the guarantees."""

    def __init__(self, path: str | Path, *, ledger_id_block: int = 64) -> None:
        """Open or create the store at ``path``.

        Ledger ids are reserved ``ledger_id_block`` at a time (one durable write per
        block); ids reserved but unused before a crash are skipped, never reused.
        """
        self.path = str(path)
        self._ledger_id_block = _check_int("ledger_id_block", ledger_id_block, 1)
        self._next_ledger_id = self._reserved_until = 0
        self._policy_changes = 0
        self._syncs_deferred = False
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot open metadata store {self.path}: {exc}") from exc
        try:
            self._db.execute("PRAGMA busy_timeout = 5000")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except (sqlite3.Error, MetadataError) as exc:
            self._db.close()
            if isinstance(exc, MetadataError):
                raise
            raise MetadataError(f"cannot open metadata store {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise MetadataError(
                f"metadata store {self.path} has schema version {version}, newer than this "
                f"Magnetar understands ({SCHEMA_VERSION}); upgrade Magnetar"
            )
        if version == 0:
            with self._transaction() as db:
                for statement in _TABLES:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        while version < SCHEMA_VERSION:
            with self._transaction() as db:
                for statement in _MIGRATIONS[version]:
                    db.execute(statement)
                version += 1
                db.execute(f"PRAGMA user_version = {version}")

    def close(self) -> None:
        self._db.close()

    def defer_syncs(self) -> None:
        """Commits stop waiting for the disk, and this connection never checkpoints (a
        checkpoint syncs the database file): the owner of another connection calls
        :meth:`sync_log` before it promises that a write of this one is durable. Ledger id
        reservations stay durable before an id is handed out."""
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint = 0")
        self._syncs_deferred = True

    def sync_log(self) -> None:
        """Every commit so far, of any connection to this store, durable: one fsync of the WAL
        (which holds each commit whole until a checkpoint copies it into the database)."""
        try:
            fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # nothing was ever written through a WAL (or the last checkpoint removed it)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def checkpoint(self) -> None:
        """Copy committed WAL pages into the database (syncing both) without blocking writers."""
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @property
    def policy_changes(self) -> int:
        """Namespace and topic policy writes (namespaces created and deleted included) through
        this store so far: values derived from policies stay valid while this does not move,
        whatever else is written (topic records and cursors are written all the time)."""
        return self._policy_changes

    @property
    def changes(self) -> int:
        """Rows written through this store so far. A value derived from the store stays
        valid while this does not move: a cheap check for hot paths instead of a query."""
        return self._db.total_changes

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _insert(self, what: str, sql: str, params: tuple[object, ...]) -> None:
        try:
            self._db.execute(sql, params)
        except sqlite3.IntegrityError:
            raise AlreadyExists(f"{what} already exists") from None

    def _update(self, what: str, sql: str, params: tuple[object, ...]) -> None:
        if self._db.execute(sql, params).rowcount == 0:
            raise NotFound(f"{what} does not exist")

    def _delete(self, sql: str, params: tuple[object, ...]) -> int:
        return self._db.execute(sql, params).rowcount

    def _value(self, sql: str, params: tuple[object, ...]) -> Any:
        row = self._db.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _column(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        return [row[0] for row in self._db.execute(sql, params)]

    # -- ledger ids ----------------------------------------------------------------------

    def next_ledger_id(self) -> int:
        """A ledger id never handed out before by this store, even across crashes."""
        if self._next_ledger_id >= self._reserved_until:
            start, end = self.reserve_ledger_ids(self._ledger_id_block)
            if self._syncs_deferred:
                self.sync_log()  # ids of a reservation a crash forgot would be handed out twice
            self._next_ledger_id, self._reserved_until = start, end
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    def reserve_ledger_ids(self, count: int) -> tuple[int, int]:
        """Ids ``[start, end)`` no other reservation on this store gets, whichever connection
        asks (durable once committed, or once synced if this connection defers syncs)."""
        with self._transaction() as db:
            start = self._value("SELECT value FROM counters WHERE name = 'ledger_id'", ())
            start = FIRST_LEDGER_ID if start is None else start
            end = start + count
            db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (end,))
        return start, end

    # -- clusters ------------------------------------------------------------------------

    def create_cluster(self, name: str, data: dict[str, Any]) -> None:
        row = (_check_name("cluster", name), _dump_json("cluster data", data))
        self._insert(f"cluster {name!r}", "INSERT INTO clusters (name, data) VALUES (?, ?)", row)

    def get_cluster(self, name: str) -> dict[str, Any] | None:
        data = self._value("SELECT data FROM clusters WHERE name = ?", (name,))
        return None if data is None else json.loads(data)

    def update_cluster(self, name: str, data: dict[str, Any]) -> None:
        params = (_dump_json("cluster data", data), name)
        self._update(f"cluster {name!r}", "UPDATE clusters SET data = ? WHERE name = ?", params)

    def list_clusters(self) -> list[str]:
        return self._column("SELECT name FROM clusters ORDER BY name")

    def delete_cluster(self, name: str) -> bool:
        return self._delete("DELETE FROM clusters WHERE name = ?", (name,)) > 0

    # -- tenants -------------------------------------------------------------------------

    def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        """``info`` is Pulsar's TenantInfo JSON: ``adminRoles``, ``allowedClusters``."""
        row = (_check_name("tenant", name), _dump_json("tenant info", info))
        self._insert(f"tenant {name!r}", "INSERT INTO tenants (name, data) VALUES (?, ?)", row)

    def get_tenant(self, name: str) -> dict[str, Any] | None:
        data = self._value("SELECT data FROM tenants WHERE name = ?", (name,))
        return None if data is None else json.loads(data)

    def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        params = (_dump_json("tenant info", info), name)
        self._update(f"tenant {name!r}", "UPDATE tenants SET data = ? WHERE name = ?", params)

    def list_tenants(self) -> list[str]:
        return self._column("SELECT name FROM tenants ORDER BY name")

    def delete_tenant(self, name: str) -> bool:
        return self._delete("DELETE FROM tenants WHERE name = ?", (name,)) > 0

    # -- namespaces ----------------------------------------------------------------------

    def create_namespace(self, name: str, policies: dict[str, Any] | None = None) -> None:
        """Create ``tenant/namespace``; the caller checks that the tenant exists."""
        row = (name, _namespace_tenant(name), _dump_json("namespace policies", policies or {}))
        self._insert(f"namespace {name!r}", "INSERT INTO namespaces (name, tenant, policies) VALUES (?, ?, ?)", row)
        self._policy_changes += 1

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None:
        policies = self._value("SELECT policies FROM namespaces WHERE name = ?", (name,))
        return None if policies is None else json.loads(policies)

    def put_namespace_policies(self, name: str, policies: dict[str, Any]) -> None:
        """Replace an existing namespace's policies; :class:`NotFound` if it was never created."""
        params = (_dump_json("namespace policies", policies), name)
        self._update(f"namespace {name!r}", "UPDATE namespaces SET policies = ? WHERE name = ?", params)
        self._policy_changes += 1

    def list_namespaces(self, tenant: str) -> list[str]:
        return self._column("SELECT name FROM namespaces WHERE tenant = ? ORDER BY name", (tenant,))

    def delete_namespace(self, name: str) -> bool:
        self._policy_changes += 1
        return self._delete("DELETE FROM namespaces WHERE name = ?", (name,)) > 0

    # -- partitioned topics --------------------------------------------------------------

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        row = (topic, _topic_namespace(topic), _check_int("partition count", partitions, 1))
        self._insert(
            f"partitioned topic {topic!r}",
            "INSERT INTO partitioned_topics (topic, namespace, partitions) VALUES (?, ?, ?)",
            row,
        )

    def get_partitioned_topic(self, topic: str) -> int | None:
        """The topic's partition count, None if it is not a partitioned topic."""
        partitions: int | None = self._value("SELECT partitions FROM partitioned_topics WHERE topic = ?", (topic,))
        return partitions

    def update_partitioned_topic(self, topic: str, partitions: int) -> None:
        params = (_check_int("partition count", partitions, 1), topic)
        self._update(
            f"partitioned topic {topic!r}",
            "UPDATE partitioned_topics SET partitions = ? WHERE topic = ?",
            params,
        )

    def list_partitioned_topics(self, namespace: str) -> dict[str, int]:
        """The namespace's partitioned topics and their partition counts, sorted by name."""
        sql = "SELECT topic, partitions FROM partitioned_topics WHERE namespace = ? ORDER BY topic"
        return dict(self._db.execute(sql, (namespace,)).fetchall())

    def delete_partitioned_topic(self, topic: str) -> bool:
        return self._delete("DELETE FROM partitioned_topics WHERE topic = ?", (topic,)) > 0

    # -- non-partitioned topics ----------------------------------------------------------

    def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> None:
        row = (topic, _topic_namespace(topic), _dump_json("topic properties", properties or {}))
        self._insert(f"topic {topic!r}", "INSERT INTO topics (topic, namespace, properties) VALUES (?, ?, ?)", row)

    def get_topic(self, topic: str) -> dict[str, Any] | None:
        """The created topic's properties, None if it was never created."""
        properties = self._value("SELECT properties FROM topics WHERE topic = ?", (topic,))
        return None if properties is None else json.loads(properties)

    def update_topic_properties(self, topic: str, properties: dict[str, Any]) -> None:
        params = (_dump_json("topic properties", properties), topic)
        self._update(f"topic {topic!r}", "UPDATE topics SET properties = ? WHERE topic = ?", params)

    def list_topics(self, namespace: str) -> list[str]:
        return self._column("SELECT topic FROM topics WHERE namespace = ? ORDER BY topic", (namespace,))

    def delete_topic(self, topic: str) -> bool:
        return self._delete("DELETE FROM topics WHERE topic = ?", (topic,)) > 0

    # -- cursors -------------------------------------------------------------------------

    def put_cursor(self, topic: str, name: str, record: CursorRecord) -> None:
        """Store a cursor's whole state, replacing the previous one atomically."""
        self.put_cursors([(topic, name, record)])

    def put_cursors(self, cursors: Iterable[tuple[str, str, CursorRecord]]) -> None:
        """Store several cursors in one transaction (one fsync): all or none."""
        rows = [_cursor_row(topic, name, record) for topic, name, record in cursors]
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO cursors (topic, name, mark_delete_ledger, mark_delete_entry,"
                " deleted_ranges, properties, last_active_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def get_cursor(self, topic: str, name: str) -> CursorRecord | None:
        row = self._db.execute(
            "SELECT mark_delete_ledger, mark_delete_entry, deleted_ranges, properties, last_active_ms"
            " FROM cursors WHERE topic = ? AND name = ?",
            (topic, name),
        ).fetchone()
        return None if row is None else _cursor_record(row)

    def list_cursors(self, topic: str) -> dict[str, CursorRecord]:
        rows = self._db.execute(
            "SELECT name, mark_delete_ledger, mark_delete_entry, deleted_ranges, properties, last_active_ms"
            " FROM cursors WHERE topic = ? ORDER BY name",
            (topic,),
        )
        return {row[0]: _cursor_record(row[1:]) for row in rows}

    def delete_cursor(self, topic: str, name: str) -> bool:
        return self._delete("DELETE FROM cursors WHERE topic = ? AND name = ?", (topic, name)) > 0

    def delete_cursors(self, topic: str) -> int:
        """Delete every cursor of ``topic``; returns how many there were."""
        return self._delete("DELETE FROM cursors WHERE topic = ?", (topic,))

    # -- schemas -------------------------------------------------------------------------

    def add_schema(self, topic: str, schema: SchemaRecord) -> int:
        """Store the next version of the topic's schema and return its number (from 0)."""
        with self._transaction():
            last = self._value("SELECT MAX(version) FROM schemas WHERE topic = ?", (topic,))
            version = 0 if last is None else last + 1
            self.put_schema(topic, version, schema)
        return version

    def put_schema(self, topic: str, version: int, schema: SchemaRecord) -> None:
        """Store version ``version`` of the topic's schema (the caller numbers them);
        storing a number twice is refused (AlreadyExists)."""
        _topic_namespace(topic)
        _check_text("schema type", schema.schema_type)
        if not isinstance(schema.data, bytes):
            raise InvalidMetadata(f"schema data must be bytes, not {type(schema.data).__name__}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in schema.properties.items()):
            raise InvalidMetadata("schema properties must map str to str")
        properties = _dump_json("schema properties", schema.properties)
        try:
            self._db.execute(
                "INSERT INTO schemas (topic, version, type, data, properties, timestamp_ms, deleted)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (topic, version, schema.schema_type, schema.data, properties, schema.timestamp_ms,
                 int(schema.deleted)),
            )
        except sqlite3.IntegrityError:
            raise AlreadyExists(f"schema version {version} of {topic} already exists") from None

    def get_schemas(self, topic: str) -> list[SchemaRecord]:
        """Every version of the topic's schema; the list index is the version."""
        rows = self._db.execute(f"SELECT {_SCHEMA_COLUMNS} FROM schemas WHERE topic = ? ORDER BY version", (topic,))
        return [_schema_record(row) for row in rows]

    def get_schema(self, topic: str, version: int) -> SchemaRecord | None:
        row = self._db.execute(
            f"SELECT {_SCHEMA_COLUMNS} FROM schemas WHERE topic = ? AND version = ?", (topic, version)
        ).fetchone()
        return None if row is None else _schema_record(row)

    def delete_schemas(self, topic: str) -> int:
        """Delete every version of the topic's schema; returns how many there were."""
        return self._delete("DELETE FROM schemas WHERE topic = ?", (topic,))

    # -- topic policies ------------------------------------------------------------------

    def get_topic_policies(self, topic: str) -> dict[str, Any] | None:
        """A topic's own policies (Pulsar's ``TopicPolicies`` JSON), None when none is set.
        A partitioned topic's are kept under its own name, not its partitions'."""
        stored: dict[str, Any] | None = self.get_json(TOPIC_POLICIES_PREFIX + topic)
        return stored

    def put_topic_policies(self, topic: str, policies: dict[str, Any]) -> None:
        """Replace a topic's policies; an empty dict removes them."""
        self._policy_changes += 1
        if policies:
            self.put_json(TOPIC_POLICIES_PREFIX + topic, policies)
        else:
            self.delete(TOPIC_POLICIES_PREFIX + topic)

    def delete_topic_policies(self, topic: str) -> bool:
        self._policy_changes += 1
        return self.delete(TOPIC_POLICIES_PREFIX + topic)

    def move_legacy_topic_policies(self) -> int:
        """Before topic policies had their own record, a topic's ``deduplicationEnabled`` was
        kept in its properties (each partition's, for a partitioned topic). Move any such
        value to the topic policies of the topic (the partitioned topic), keeping a policy
        set since, in one transaction; how many topic records were changed."""
        self._policy_changes += 1
        rows = self._db.execute("SELECT topic, properties FROM topics"
                                " WHERE json_type(properties, '$.deduplicationEnabled') IN ('true', 'false')"
                                ).fetchall()
        with self._transaction() as db:
            for topic, text in rows:
                properties = json.loads(text)
                value = properties.pop("deduplicationEnabled")
                key = TOPIC_POLICIES_PREFIX + _PARTITION_SUFFIX.sub("", topic)
                stored = db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
                policies = {"deduplicationEnabled": value, **(json.loads(stored[0]) if stored else {})}
                db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                           (key, _dump_json("topic policies", policies)))
                db.execute("UPDATE topics SET properties = ? WHERE topic = ?",
                           (_dump_json("topic properties", properties), topic))
        return len(rows)

    # -- generic JSON key-value ----------------------------------------------------------

    def get_json(self, key: str) -> Any:
        """The value stored under ``key``, None if there is none."""
        value = self._value("SELECT value FROM kv WHERE key = ?", (key,))
        return None if value is None else json.loads(value)

    def put_json(self, key: str, value: Any) -> None:
        row = (_check_text("key", key), _dump_json(f"value for {key!r}", value, object_only=False))
        self._db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", row)

    def delete(self, key: str) -> bool:
        return self._delete("DELETE FROM kv WHERE key = ?", (key,)) > 0

    def list_prefix(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""
        sql = "SELECT key FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key"
        return self._column(sql, (len(prefix), prefix))


_SCHEMA_COLUMNS = "type, data, properties, timestamp_ms, deleted"


def _schema_record(row: tuple[Any, ...]) -> SchemaRecord:
    kind, data, properties, timestamp_ms, deleted = row
    return SchemaRecord(kind, data, json.loads(properties), timestamp_ms, bool(deleted))


class MemoryMetadataStore(MetadataStore):
    """The metadata store on an in-memory SQLite database: same code, nothing on disk."""

    def __init__(self, *, ledger_id_block: int = 64) -> None:
        super().__init__(":memory:", ledger_id_block=ledger_id_block)
