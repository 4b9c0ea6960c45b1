"""The metadata writes the event loop must not wait for, done in order on one thread.

Every cursor write is a SQLite commit with ``synchronous=FULL``: an fsync. At one write
per second per changed cursor (``managedLedgerDefaultMarkDeleteRateLimit``) and on every
subscribe, seek or skip, those fsyncs would stall every connection of the broker. This
thread owns a second connection to the same store (WAL lets the event loop's connection
read meanwhile) and applies writes in the order they were submitted, so a delete never
overtakes the write it undoes. Callers get a ``concurrent.futures.Future``; a caller
that must answer only once the write is durable (SUBSCRIBE, the admin API) waits on it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from magnetar.core.cursor_record import CursorRecord
from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger("magnetar.metadata")
T = TypeVar("T")


class MetadataWriter:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="magnetar-metadata")
        self._local = threading.local()

    def _store(self) -> MetadataStore:
        store: MetadataStore | None = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = MetadataStore(self.path)
        return store

    def submit(self, write: Callable[[MetadataStore], T]) -> concurrent.futures.Future[T]:
        return self._executor.submit(lambda: write(self._store()))

    def put_cursors(self, rows: Iterable[tuple[str, str, CursorRecord]]) -> concurrent.futures.Future[None]:
        rows = list(rows)
        return self.submit(lambda store: store.put_cursors(rows))

    def delete_cursor(self, topic: str, name: str) -> concurrent.futures.Future[bool]:
        return self.submit(lambda store: store.delete_cursor(topic, name))

    def barrier(self) -> concurrent.futures.Future[None]:
        """Done once every write submitted before it is done."""
        return self.submit(lambda store: None)

    def close(self) -> None:
        """Finish the writes submitted so far, then close the connection."""
        def close_store(store: MetadataStore) -> None:
            store.close()
            self._local.store = None
        try:
            self.submit(close_store).result()
        except Exception:
            log.exception("closing the metadata writer failed")
        self._executor.shutdown(wait=True)
