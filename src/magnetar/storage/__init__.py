"""Storage: the managed ledger on disk, its in-memory twin, and the metadata store.

- ``interfaces``      what the core calls: :class:`ManagedLedger`, :class:`LedgerFactory`, errors
                      (imported from there, not from this package).
- ``ledger_index``    position arithmetic shared by both ledger implementations.
- ``segment_ledger``  segment files per ledger, torn-tail recovery, tail read cache.
- ``memory_ledger``   the in-memory twin for core tests and simulation.
- ``group_commit``    the fsync worker: many appends, one fsync per ledger per round.
- ``metadata_store``  tenants, namespaces, topics, cursors, schemas, ledger ids in SQLite (the
                      standalone broker's), split by concept in ``sqlite_metadata*``.
- ``zookeeper``       the same records in ZooKeeper, for brokers of a cluster.
- ``metadata_stores`` which of the two a broker's config names. Both implement
                      :mod:`magnetar.core.metadata.interfaces`.
"""

from magnetar.storage.group_commit import GroupCommitter, SyncedBatch
from magnetar.storage.memory_ledger import MemoryLedger, MemoryLedgerFactory
from magnetar.storage.metadata_store import (
    AlreadyExists,
    CursorRecord,
    InvalidMetadata,
    MemoryMetadataStore,
    MetadataError,
    MetadataStore,
    NotFound,
    SchemaRecord,
)
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory

__all__ = [
    "AlreadyExists",
    "CursorRecord",
    "GroupCommitter",
    "InvalidMetadata",
    "MemoryLedger",
    "MemoryLedgerFactory",
    "MemoryMetadataStore",
    "MetadataError",
    "MetadataStore",
    "NotFound",
    "SchemaRecord",
    "SegmentLedger",
    "SegmentLedgerFactory",
    "SyncedBatch",
]
