"""The SQLite side of the metadata store: the connection, its durability, the schema of
its tables and their migrations, and the ledger id counter. The records, by concept, are
in :mod:`magnetar.storage.sqlite_metadata_tables`; :mod:`magnetar.storage.metadata_store`
puts them together.

One connection, used from the owner thread (``sqlite3`` enforces it). The journal is a
WAL with ``synchronous=FULL``: every write is on disk when its method returns, which
cursor positions and the ledger id counter need. Each method is one statement or one
transaction, so a crash leaves every record either old or new, never half written.

A thread that must not wait for the disk (the broker's event loop) calls
:meth:`SqliteConnection.defer_syncs`: its commits then reach the WAL without an fsync, and
become durable when some thread calls :meth:`SqliteConnection.sync_log` (one fsync of the
WAL covers every commit before it, whichever connection made it).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from magnetar.core.metadata.records import AlreadyExists, MetadataError, NotFound
from magnetar.storage.metadata_checks import check_int

#: Version of the tables below, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 3
#: The first ledger id a new store hands out.
FIRST_LEDGER_ID = 1

_TABLES = (
    "CREATE TABLE clusters (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    "CREATE TABLE tenants (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    "CREATE TABLE namespaces (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, policies TEXT NOT NULL,"
    " version INTEGER NOT NULL DEFAULT 0)",
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
    2: ("ALTER TABLE namespaces ADD COLUMN version INTEGER NOT NULL DEFAULT 0",),
}


class SqliteConnection:
    """One connection to a metadata store's SQLite file; see the module docstring."""

    def __init__(self, path: str | Path, *, ledger_id_block: int = 64) -> None:
        """Open or create the store at ``path``.

        Ledger ids are reserved ``ledger_id_block`` at a time (one durable write per
        block); ids reserved but unused before a crash are skipped, never reused.
        """
        self.path = str(path)
        self._ledger_id_block = check_int("ledger_id_block", ledger_id_block, 1)
        self._next_ledger_id = self._reserved_until = 0
        self._policy_changes = 0
        self._topic_list_changes = 0
        self._syncs_deferred = False
        self._wal_fd: int | None = None
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
        self._close_wal()
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
        fd = self._wal_descriptor()
        if fd is not None:
            os.fsync(fd)

    def _wal_descriptor(self) -> int | None:
        """The WAL's descriptor, opened once and kept while the file is the same one: a sync
        must not need a new descriptor when a flood of topics has taken them all."""
        try:
            wal = os.stat(self.path + "-wal")
        except FileNotFoundError:
            self._close_wal()
            return None  # nothing was ever written through a WAL (or the last checkpoint removed it)
        if self._wal_fd is not None:
            held = os.fstat(self._wal_fd)
            if (held.st_dev, held.st_ino) == (wal.st_dev, wal.st_ino):
                return self._wal_fd
            self._close_wal()
        self._wal_fd = os.open(self.path + "-wal", os.O_RDONLY)
        return self._wal_fd

    def _close_wal(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None

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
    def topic_list_changes(self) -> int:
        """Writes that may change a list of stored topics (topics, partitioned topics and
        namespaces created or deleted, partition counts changed) through this store so far:
        a topic list read from the store stays valid while this does not move, whatever else
        is written (cursors and ledgers are written all the time)."""
        return self._topic_list_changes

    @property
    def changes(self) -> int:
        """Rows written through this store so far. A value derived from the store stays
        valid while this does not move: a cheap check for hot paths instead of a query."""
        return self._db.total_changes

    def __enter__(self) -> Self:
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
        check_int("ledger id count", count, 1)
        with self._transaction() as db:
            start = self._value("SELECT value FROM counters WHERE name = 'ledger_id'", ())
            start = FIRST_LEDGER_ID if start is None else start
            end = start + count
            db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (end,))
        return start, end
