"""The metadata writes the event loop must not wait for, done in order on one thread.

A durable SQLite commit is an fsync. At one write per second per changed cursor
(``managedLedgerDefaultMarkDeleteRateLimit``), on every subscribe, seek or skip, and on
every topic or policy the admin API creates, those fsyncs would stall every connection
of the broker. So the event loop's own connection commits without syncing
(:meth:`MetadataStore.defer_syncs`), and this thread owns a second connection to the same
store (WAL lets the loop read meanwhile). It applies writes in the order they were
submitted, so a delete never overtakes the write it undoes, and it takes every write
waiting when it wakes as one group: each committed, then one fsync of the WAL makes the
group durable (and every commit the loop made before it), then their futures complete.
Callers get a ``concurrent.futures.Future``; a caller that must answer only once a write
is durable (SUBSCRIBE, a new topic's PRODUCER, the admin API) waits on it or on
:meth:`MetadataWriter.barrier`.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.metadata_stores import local_store

log = logging.getLogger("magnetar.metadata")
T = TypeVar("T")

#: WAL size past which the writer copies it into the database (the loop never does)
CHECKPOINT_BYTES = 4 << 20
#: at most one such checkpoint per this many seconds
CHECKPOINT_INTERVAL_S = 1.0

_Write = tuple[Callable[[BrokerMetadataStore], Any], "concurrent.futures.Future[Any]"]


class MetadataWriter:
    def __init__(self, path: Path | str, shared: BrokerMetadataStore | None = None) -> None:
        """``path``: the SQLite store this thread opens its own connection to; ``shared``: a
        store safe to use from any thread (ZooKeeper), used as it is instead."""
        self.path = str(path)
        self._shared = shared
        self._queue: deque[_Write] = deque()
        self._wake = threading.Condition()
        self._closing = False
        self._store: BrokerMetadataStore | None = None
        self._checkpointed_at = 0.0
        self._thread = threading.Thread(target=self._run, name="magnetar-metadata", daemon=True)
        self._thread.start()
        # a process that ends without close() still applies what was submitted, as an
        # executor's workers would (the thread is a daemon so a forgotten close never hangs exit)
        atexit.register(_close_at_exit, weakref.ref(self))

    def submit(self, write: Callable[[BrokerMetadataStore], T]) -> concurrent.futures.Future[T]:
        """``write`` applied on the writer's connection; done once it is durable."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._wake:
            if self._closing:
                raise RuntimeError("the metadata writer is closed")
            self._queue.append((write, future))
            self._wake.notify()
        return future

    def put_cursors(self, rows: Iterable[tuple[str, str, CursorRecord]]) -> concurrent.futures.Future[None]:
        rows = list(rows)
        return self.submit(lambda store: store.put_cursors(rows))

    def delete_cursor(self, topic: str, name: str) -> concurrent.futures.Future[bool]:
        return self.submit(lambda store: store.delete_cursor(topic, name))

    def barrier(self) -> concurrent.futures.Future[None]:
        """Done once every write submitted before it, and every commit the event loop's
        connection made before it, is durable."""
        return self.submit(_barrier)

    def close(self) -> None:
        """Finish the writes submitted so far, then close the connection."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()

    # -- the writer's thread -----------------------------------------------------------
    def _run(self) -> None:
        while (group := self._next_group()) is not None:
            self._apply(group)
        if self._store is not None and self._shared is None:
            self._store.close()
        self._store = None

    def _next_group(self) -> list[_Write] | None:
        with self._wake:
            while not self._queue and not self._closing:
                self._wake.wait()
            if not self._queue:
                return None
            group = list(self._queue)
            self._queue.clear()
        # a write whose waiter was cancelled before it started is not applied, as an executor does
        return [(write, future) for write, future in group if future.set_running_or_notify_cancel()]

    def _apply(self, group: list[_Write]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            store = self._opened()
            before = store.changes
            for write, _ in group:
                outcomes.append(_outcome(write, store))
            local = local_store(store)
            if local is not None and (store.changes != before or any(write is _barrier for write, _ in group)):
                local.sync_log()
                self._maybe_checkpoint(local)
        except Exception as exc:  # the store could not be opened or synced: nothing is durable
            log.error("metadata writes failed: %s", exc)
            outcomes = [(False, exc)] * len(group)
        for (_, future), (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def _opened(self) -> BrokerMetadataStore:
        if self._store is None and self._shared is not None:
            self._store = self._shared
        elif self._store is None:
            local = MetadataStore(self.path)
            local.defer_syncs()
            self._store = local
        return self._store

    def _maybe_checkpoint(self, store: MetadataStore) -> None:
        now = time.monotonic()
        if now - self._checkpointed_at < CHECKPOINT_INTERVAL_S:
            return
        try:
            size = os.stat(self.path + "-wal").st_size
        except FileNotFoundError:
            return
        if size >= CHECKPOINT_BYTES:
            self._checkpointed_at = now
            store.checkpoint()


def _close_at_exit(writer: weakref.ref[MetadataWriter]) -> None:
    alive = writer()
    if alive is not None:
        alive.close()


def _barrier(store: BrokerMetadataStore) -> None:
    """Writes nothing; the group it is in is synced."""


def _outcome(write: Callable[[BrokerMetadataStore], Any], store: BrokerMetadataStore) -> tuple[bool, Any]:
    try:
        return True, write(store)
    except Exception as exc:
        return False, exc
