"""Broker metadata in an embedded SQLite database (where Pulsar uses ZooKeeper or etcd): the
standalone broker's :class:`~magnetar.core.metadata.interfaces.BrokerMetadataStore`.

Holds clusters, tenants, namespaces and their policies, partitioned-topic metadata,
created topics, cursor positions (Pulsar's ``ManagedCursorInfo``), schema versions
(Pulsar's ``SchemaRegistry``), the broker-wide ledger id counter, and a generic JSON
key-value space for everything else. The connection and its durability are
:mod:`magnetar.storage.sqlite_metadata`; the records, one class per concept,
:mod:`magnetar.storage.sqlite_metadata_tables`; broker registrations and bundle ownership,
which only a cluster shares, live in the store object (:mod:`magnetar.storage.local_coordination`).

:class:`MemoryMetadataStore` is the same class on an in-memory database, so the twin
behaves identically by construction.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.core.metadata.records import (
    AlreadyExists,
    InvalidMetadata,
    MetadataError,
    NotFound,
    SchemaRecord,
    VersionConflict,
)
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage.local_coordination import LocalCoordination
from magnetar.storage.metadata_checks import decode_ranges, encode_ranges
from magnetar.storage.sqlite_metadata import FIRST_LEDGER_ID, SCHEMA_VERSION, SqliteConnection
from magnetar.storage.sqlite_metadata_tables import (
    TOPIC_POLICIES_PREFIX,
    AdminTables,
    CursorTables,
    ManagedLedgerTables,
    PolicyAndKeyTables,
    SchemaTables,
    TopicTables,
)

__all__ = ["FIRST_LEDGER_ID", "SCHEMA_VERSION", "TOPIC_POLICIES_PREFIX", "AlreadyExists", "CursorRecord",
           "InvalidMetadata", "MemoryMetadataStore", "MetadataError", "MetadataStore", "NotFound", "SchemaRecord",
           "VersionConflict", "decode_ranges", "encode_ranges"]


class MetadataStore(AdminTables, TopicTables, ManagedLedgerTables, CursorTables, SchemaTables, PolicyAndKeyTables,
                    LocalCoordination):
    """Broker metadata in a SQLite file; see the module docstring for the guarantees."""

    def __init__(self, path: str | Path, *, ledger_id_block: int = 64) -> None:
        """Open or create the store at ``path``.

        Ledger ids are reserved ``ledger_id_block`` at a time (one durable write per
        block); ids reserved but unused before a crash are skipped, never reused.
        """
        SqliteConnection.__init__(self, path, ledger_id_block=ledger_id_block)
        LocalCoordination.__init__(self)

    def close(self) -> None:
        self.end_session()
        SqliteConnection.close(self)


class MemoryMetadataStore(MetadataStore):
    """The metadata store on an in-memory SQLite database: same code, nothing on disk."""

    def __init__(self, *, ledger_id_block: int = 64) -> None:
        super().__init__(":memory:", ledger_id_block=ledger_id_block)


if TYPE_CHECKING:
    from magnetar.core.metadata.interfaces import BrokerMetadataStore

    _implements: type[BrokerMetadataStore] = MetadataStore
