"""The storage interfaces, defined in core (:mod:`magnetar.core.topics.managed_ledger`), where
the broker logic that uses them lives; storage implements them."""

from __future__ import annotations

from magnetar.core.topics.managed_ledger import (
    MAX_ENTRY_SIZE_BYTES,
    AppendFailed,
    EntryNotFound,
    LedgerClosed,
    LedgerConfig,
    LedgerCorruption,
    LedgerFactory,
    LedgerInfo,
    ManagedLedger,
    StorageError,
)

__all__ = ["MAX_ENTRY_SIZE_BYTES", "AppendFailed", "EntryNotFound", "LedgerClosed", "LedgerConfig",
           "LedgerCorruption", "LedgerFactory", "LedgerInfo", "ManagedLedger", "StorageError"]
