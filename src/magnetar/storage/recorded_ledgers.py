"""Where a cluster's broker records a topic's ledgers: the list in the metadata store.

A standalone broker's ledger list is its segment files. Brokers of a cluster share the
files, so the list that counts is the one in the metadata store (``/managed-ledgers/...``,
:mod:`magnetar.core.cluster.managed_ledger_info`), changed by compare-and-set: a ledger's
file is read only up to the number of entries the list closed it at, files the list does
not name are not the topic's (a writer that lost its compare-and-set made them), and a
rollover or a close is recorded before any entry after it is reported durable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from magnetar.storage.interfaces import StorageError


class LedgerFenced(StorageError):
    """Another broker changed the topic's ledger list since this writer last wrote it: it
    took the topic over and closed this writer's ledger, so nothing more may be
    acknowledged on it."""


class RecordedLedgers(Protocol):
    """A topic's ledger list as its writer keeps it (see the module docstring)."""

    @property
    def recorded(self) -> Mapping[int, int]:
        """The closed ledgers the list names, each with its number of entries."""
        ...

    def rolled(self, closed_id: int, entries: int, new_id: int, kept: Sequence[int]) -> None:
        """Record ``closed_id`` closed at ``entries`` and ``new_id`` open, keeping of the
        earlier ledgers only ``kept``; on the syncing thread, before any entry of
        ``new_id`` is reported durable. Raises :class:`LedgerFenced` when the list moved
        under this writer, :class:`StorageError` when the store did not answer."""
        ...

    def closed(self, ledger_id: int, entries: int, kept: Sequence[int]) -> None:
        """Record the open ledger closed at ``entries`` (a release): the next owner has no
        writer to wait out. Same errors as :meth:`rolled`."""
        ...

    def deleted(self) -> None:
        """The topic's files were deleted: its list goes too (unless another broker changed
        it meanwhile). Errors are the caller's to log."""
        ...
