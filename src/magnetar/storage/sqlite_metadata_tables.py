"""The metadata store's records in SQLite, one class per concept; each is a view of the
one connection (:class:`~magnetar.storage.sqlite_metadata.SqliteConnection`) that
:class:`~magnetar.storage.metadata_store.MetadataStore` combines."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from magnetar.core.metadata.records import AlreadyExists, NotFound, SchemaRecord, VersionConflict, Versioned
from magnetar.core.positions import Position
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage.metadata_checks import (
    PARTITION_SUFFIX,
    check_cursor,
    check_int,
    check_managed_ledger,
    check_name,
    check_schema,
    check_text,
    decode_ranges,
    dump_json,
    namespace_tenant,
    topic_namespace,
)
from magnetar.storage.sqlite_metadata import SqliteConnection

#: key prefix of topic policies in the key-value table
TOPIC_POLICIES_PREFIX = "topic-policies/"
#: key prefix of managed ledger records in the key-value table
MANAGED_LEDGERS_PREFIX = "managed-ledgers/"


class AdminTables(SqliteConnection):
    """Clusters, tenants and namespaces with their policies."""

    # -- clusters ------------------------------------------------------------------------

    def create_cluster(self, name: str, data: dict[str, Any]) -> None:
        row = (check_name("cluster", name), dump_json("cluster data", data))
        self._insert(f"cluster {name!r}", "INSERT INTO clusters (name, data) VALUES (?, ?)", row)

    def get_cluster(self, name: str) -> dict[str, Any] | None:
        data = self._value("SELECT data FROM clusters WHERE name = ?", (name,))
        return None if data is None else json.loads(data)

    def update_cluster(self, name: str, data: dict[str, Any]) -> None:
        params = (dump_json("cluster data", data), name)
        self._update(f"cluster {name!r}", "UPDATE clusters SET data = ? WHERE name = ?", params)

    def list_clusters(self) -> list[str]:
        return self._column("SELECT name FROM clusters ORDER BY name")

    def delete_cluster(self, name: str) -> bool:
        return self._delete("DELETE FROM clusters WHERE name = ?", (name,)) > 0

    # -- tenants -------------------------------------------------------------------------

    def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        """``info`` is Pulsar's TenantInfo JSON: ``adminRoles``, ``allowedClusters``."""
        row = (check_name("tenant", name), dump_json("tenant info", info))
        self._insert(f"tenant {name!r}", "INSERT INTO tenants (name, data) VALUES (?, ?)", row)

    def get_tenant(self, name: str) -> dict[str, Any] | None:
        data = self._value("SELECT data FROM tenants WHERE name = ?", (name,))
        return None if data is None else json.loads(data)

    def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        params = (dump_json("tenant info", info), name)
        self._update(f"tenant {name!r}", "UPDATE tenants SET data = ? WHERE name = ?", params)

    def list_tenants(self) -> list[str]:
        return self._column("SELECT name FROM tenants ORDER BY name")

    def delete_tenant(self, name: str) -> bool:
        return self._delete("DELETE FROM tenants WHERE name = ?", (name,)) > 0

    # -- namespaces ----------------------------------------------------------------------

    def create_namespace(self, name: str, policies: dict[str, Any] | None = None) -> None:
        """Create ``tenant/namespace``; the caller checks that the tenant exists."""
        row = (name, namespace_tenant(name), dump_json("namespace policies", policies or {}))
        self._insert(f"namespace {name!r}", "INSERT INTO namespaces (name, tenant, policies) VALUES (?, ?, ?)", row)
        self._policy_changes += 1
        self._topic_list_changes += 1

    def get_namespace_policies(self, name: str) -> dict[str, Any] | None:
        policies = self._value("SELECT policies FROM namespaces WHERE name = ?", (name,))
        return None if policies is None else json.loads(policies)

    def put_namespace_policies(self, name: str, policies: dict[str, Any]) -> None:
        """Replace an existing namespace's policies; :class:`NotFound` if it was never created."""
        params = (dump_json("namespace policies", policies), name)
        self._update(f"namespace {name!r}", "UPDATE namespaces SET policies = ?, version = version + 1 "
                     "WHERE name = ?", params)
        self._policy_changes += 1

    def get_versioned_namespace_policies(self, name: str) -> Versioned | None:
        row = self._db.execute("SELECT policies, version FROM namespaces WHERE name = ?", (name,)).fetchone()
        return None if row is None else Versioned(json.loads(row[0]), row[1])

    def put_versioned_namespace_policies(self, name: str, policies: dict[str, Any], version: int) -> int:
        params = (dump_json("namespace policies", policies), name, check_int("namespace policies version", version, 0))
        with self._transaction() as db:
            if db.execute("UPDATE namespaces SET policies = ?, version = version + 1 WHERE name = ? AND version = ?",
                          params).rowcount == 0:
                held = self._value("SELECT version FROM namespaces WHERE name = ?", (name,))
                if held is None:
                    raise NotFound(f"namespace {name!r} does not exist")
                raise VersionConflict(f"the policies of namespace {name!r} are at version {held}, "
                                      f"not {version}: changed by someone else since they were read")
        self._policy_changes += 1
        return version + 1

    def list_namespaces(self, tenant: str) -> list[str]:
        return self._column("SELECT name FROM namespaces WHERE tenant = ? ORDER BY name", (tenant,))

    def delete_namespace(self, name: str) -> bool:
        self._policy_changes += 1
        self._topic_list_changes += 1
        return self._delete("DELETE FROM namespaces WHERE name = ?", (name,)) > 0


class TopicTables(SqliteConnection):
    """Partitioned-topic metadata and created topics with their properties."""

    # -- partitioned topics --------------------------------------------------------------

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        row = (topic, topic_namespace(topic), check_int("partition count", partitions, 1))
        self._topic_list_changes += 1
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
        params = (check_int("partition count", partitions, 1), topic)
        self._topic_list_changes += 1
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
        self._topic_list_changes += 1
        return self._delete("DELETE FROM partitioned_topics WHERE topic = ?", (topic,)) > 0

    # -- non-partitioned topics ----------------------------------------------------------

    def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> None:
        row = (topic, topic_namespace(topic), dump_json("topic properties", properties or {}))
        self._topic_list_changes += 1
        self._insert(f"topic {topic!r}", "INSERT INTO topics (topic, namespace, properties) VALUES (?, ?, ?)", row)

    def get_topic(self, topic: str) -> dict[str, Any] | None:
        """The created topic's properties, None if it was never created."""
        properties = self._value("SELECT properties FROM topics WHERE topic = ?", (topic,))
        return None if properties is None else json.loads(properties)

    def update_topic_properties(self, topic: str, properties: dict[str, Any]) -> None:
        params = (dump_json("topic properties", properties), topic)
        self._update(f"topic {topic!r}", "UPDATE topics SET properties = ? WHERE topic = ?", params)

    def list_topics(self, namespace: str) -> list[str]:
        return self._column("SELECT topic FROM topics WHERE namespace = ? ORDER BY topic", (namespace,))

    def delete_topic(self, topic: str) -> bool:
        self._topic_list_changes += 1
        return self._delete("DELETE FROM topics WHERE topic = ?", (topic,)) > 0


class ManagedLedgerTables(SqliteConnection):
    """Managed ledger records with their versions, in the key-value table (the standalone
    broker's ledgers keep their own lists; a shared store needs these)."""

    def get_managed_ledger(self, topic: str) -> Versioned | None:
        value = self._value("SELECT value FROM kv WHERE key = ?", (MANAGED_LEDGERS_PREFIX + topic,))
        if value is None:
            return None
        stored = json.loads(value)
        return Versioned(stored["info"], stored["version"])

    def put_managed_ledger(self, topic: str, info: dict[str, Any], version: int) -> int:
        """Create (``version`` -1) or replace the record at ``version``; its new version."""
        body = check_managed_ledger(topic, info)
        check_int("managed ledger version", version, -1)
        with self._transaction() as db:
            held = self._held_version(topic)
            if version == -1 and held is not None:
                raise AlreadyExists(f"managed ledger of {topic} already exists")
            if version != -1:
                self._check_held(topic, held, version)
            db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                       (MANAGED_LEDGERS_PREFIX + topic, f'{{"version":{version + 1},"info":{body}}}'))
        return version + 1

    def delete_managed_ledger(self, topic: str, version: int) -> None:
        with self._transaction() as db:
            self._check_held(topic, self._held_version(topic), version)
            db.execute("DELETE FROM kv WHERE key = ?", (MANAGED_LEDGERS_PREFIX + topic,))

    def _held_version(self, topic: str) -> int | None:
        found = self.get_managed_ledger(topic)
        return None if found is None else found.version

    @staticmethod
    def _check_held(topic: str, held: int | None, version: int) -> None:
        if held is None:
            raise NotFound(f"managed ledger of {topic} does not exist")
        if held != version:
            raise VersionConflict(f"managed ledger of {topic} is at version {held}, not {version}")


class CursorTables(SqliteConnection):
    """Each cursor's record (Pulsar's ``ManagedCursorInfo``)."""

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


class SchemaTables(SqliteConnection):
    """Each topic's schema versions (Pulsar's ``SchemaRegistry``)."""

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
        properties = check_schema(topic, schema)
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


class PolicyAndKeyTables(SqliteConnection):
    """Topic policies and the generic JSON key-value space they are kept in."""

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
                key = TOPIC_POLICIES_PREFIX + PARTITION_SUFFIX.sub("", topic)
                stored = db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
                policies = {"deduplicationEnabled": value, **(json.loads(stored[0]) if stored else {})}
                db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                           (key, dump_json("topic policies", policies)))
                db.execute("UPDATE topics SET properties = ? WHERE topic = ?",
                           (dump_json("topic properties", properties), topic))
        return len(rows)

    # -- generic JSON key-value ----------------------------------------------------------

    def get_json(self, key: str) -> Any:
        """The value stored under ``key``, None if there is none."""
        value = self._value("SELECT value FROM kv WHERE key = ?", (key,))
        return None if value is None else json.loads(value)

    def put_json(self, key: str, value: Any) -> None:
        row = (check_text("key", key), dump_json(f"value for {key!r}", value, object_only=False))
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


def _cursor_row(topic: str, name: str, record: CursorRecord) -> tuple[object, ...]:
    mark_delete, ranges, properties = check_cursor(topic, name, record)
    return (topic, name, mark_delete.ledger_id, mark_delete.entry_id, ranges, properties, record.last_active_ms)


def _cursor_record(row: tuple[Any, ...]) -> CursorRecord:
    ledger_id, entry_id, ranges, properties, last_active_ms = row
    mark_delete = Position(ledger_id, entry_id)
    return CursorRecord(mark_delete, decode_ranges(ranges), json.loads(properties), last_active_ms)
