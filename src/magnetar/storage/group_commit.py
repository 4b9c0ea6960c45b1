"""Group commit: many appends, one fsync per ledger per round, off the event loop.

This is the journal thread of a BookKeeper bookie (``journalSyncData``, group commit of
``journalMaxGroupWaitMSec`` without the wait) in one class. The owner thread appends and
calls :meth:`GroupCommitter.mark_dirty`; one worker thread repeatedly takes every ledger
marked so far, calls ``sync()`` on each (``fdatasync`` releases the GIL), and hands the
positions now durable to ``on_synced`` in one call per round. A round covers every append
made before it started, so under load one fsync acknowledges many writes.

``on_synced`` and ``on_error`` run on the worker thread, in round order; the asyncio
server wraps them with ``loop.call_soon_threadsafe``. With ``sync_enabled=False``
(``journalSyncData=false``) the worker skips the fsync and reports the position each
ledger had reached when it was marked, through the same queue, so order is kept.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable

from magnetar.core.positions import Position
from magnetar.storage.interfaces import ManagedLedger

log = logging.getLogger("magnetar.storage")

SyncedBatch = list[tuple[ManagedLedger, Position]]


def _log_sync_error(ledger: ManagedLedger, exc: Exception) -> None:
    log.error("sync of managed ledger %r failed: %s", ledger.name, exc, exc_info=exc)


class GroupCommitter:
    """Makes appends durable in batches on a background thread."""

    def __init__(
        self,
        on_synced: Callable[[SyncedBatch], None],
        *,
        sync_enabled: bool = True,
        on_error: Callable[[ManagedLedger, Exception], None] = _log_sync_error,
        thread_name: str = "magnetar-group-commit",
    ) -> None:
        self.sync_enabled = sync_enabled
        self._on_synced = on_synced
        self._on_error = on_error
        self._thread_name = thread_name
        lock = threading.Lock()
        self._wakeup = threading.Condition(lock)  # the worker waits here for marks
        self._round_done = threading.Condition(lock)  # flush() waits here
        # id(ledger) -> (ledger, position to report when not syncing); insertion order.
        self._dirty: dict[int, tuple[ManagedLedger, Position | None]] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Worker-only: the last position reported per ledger, so a ledger marked again
        # after a round already covered its appends is not reported twice.
        self._reported: weakref.WeakKeyDictionary[ManagedLedger, Position] = weakref.WeakKeyDictionary()
        self._rounds_started = 0
        #: Completed rounds (each one sync() per dirty ledger).
        self.rounds = 0
        #: Called on the worker thread with each ledger and how long its sync() took.
        self.on_sync_time: Callable[[ManagedLedger, float], None] | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("group committer already started")
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Finish the ledgers already marked, then end the worker."""
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> GroupCommitter:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Block until everything marked before the call is synced and reported.

        Returns False on timeout. Call it from a thread other than the worker's.
        """
        with self._round_done:
            target = self._rounds_started + 1 if self._dirty else self._rounds_started
            return self._round_done.wait_for(lambda: self.rounds >= target, timeout_s)

    @property
    def idle(self) -> bool:
        """Nothing marked and no round running (read without the lock: a glance, for work
        that only wants to keep out of a sync's way)."""
        return not self._dirty and self.rounds == self._rounds_started

    def mark_dirty(self, ledger: ManagedLedger) -> None:
        """Ask for everything appended to ``ledger`` so far to be made durable and reported.

        Writes what the ledger buffers first (:class:`~magnetar.storage.interfaces.AppendFailed`
        if that fails: nothing is marked then)."""
        ledger.flush()
        reached = None if self.sync_enabled else ledger.last_position()
        with self._wakeup:
            if self._stopping:
                raise RuntimeError("group committer is stopped; appends can no longer be made durable")
            if not self._dirty:
                self._wakeup.notify()
            self._dirty[id(ledger)] = (ledger, reached)

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            self._commit(batch)

    def _take(self) -> list[tuple[ManagedLedger, Position | None]] | None:
        with self._wakeup:
            while not self._dirty and not self._stopping:
                self._wakeup.wait()
            if not self._dirty:
                return None
            batch = list(self._dirty.values())
            self._dirty.clear()
            self._rounds_started += 1
            return batch

    def _commit(self, batch: list[tuple[ManagedLedger, Position | None]]) -> None:
        synced: SyncedBatch = []
        for ledger, reached in batch:
            started = time.perf_counter()
            try:
                position = ledger.sync() if self.sync_enabled else reached
            except Exception as exc:  # one ledger's failure must not hold back the others
                self._report_error(ledger, exc)
                continue
            if self.on_sync_time is not None and self.sync_enabled:
                self._report_sync_time(ledger, time.perf_counter() - started)
            last = self._reported.get(ledger)
            if position is not None and (last is None or position > last):
                self._reported[ledger] = position
                synced.append((ledger, position))
        if synced:
            try:
                self._on_synced(synced)
            except Exception:
                log.exception("group commit callback failed")
        with self._round_done:
            self.rounds += 1
            self._round_done.notify_all()

    def _report_sync_time(self, ledger: ManagedLedger, seconds: float) -> None:
        try:
            self.on_sync_time(ledger, seconds)  # type: ignore[misc]
        except Exception:
            log.exception("group commit timing callback failed")

    def _report_error(self, ledger: ManagedLedger, exc: Exception) -> None:
        try:
            self._on_error(ledger, exc)
        except Exception:
            log.exception("group commit error callback failed")
