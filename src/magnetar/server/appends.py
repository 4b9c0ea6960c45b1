"""Appends on their way to the disk: written once per loop turn, synced by the group
committer's thread, and reported back to core on the event loop.

Core appends into a ledger's write buffer as it decides a publish; this writes what a
connection's read appended once that read is handled (one write per ledger for every
SEND the read carried), at the latest when the loop turn is over, and marks the ledger
for the next group commit. Waiting longer would batch more but delays every receipt,
and clients with a bounded queue of pending sends (the official ones) then send less.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from magnetar.core.errors import ServiceNotReady
from magnetar.core.policies.disk_usage import DiskUsage
from magnetar.core.positions import Position
from magnetar.core.topics import publish
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.publish import RawSend
from magnetar.core.topics.topic import Topic
from magnetar.server.broker_stats import BrokerStatsRecorder
from magnetar.server.clock import monotonic_ms, now_ms
from magnetar.server.loop_activity import LoopActivity
from magnetar.storage.group_commit import GroupCommitter
from magnetar.storage.interfaces import AppendFailed, LedgerClosed, ManagedLedger

log = logging.getLogger("magnetar.broker")


class Appends:
    def __init__(self, topics: dict[str, Topic], recorder: BrokerStatsRecorder, disk: DiskUsage,
                 sync_enabled: bool, unload: Callable[[Topic], None]) -> None:
        self._topics = topics
        self._recorder = recorder
        self._disk = disk
        #: a topic whose ledger cannot sync is unloaded, so its next use recovers afresh
        self._unload = unload
        self.committer = GroupCommitter(self._on_synced_from_thread, sync_enabled=sync_enabled,
                                        on_error=self._on_sync_error_from_thread)
        self.committer.on_sync_time = lambda ledger, seconds: recorder.ledger_synced(ledger.name, seconds)
        self.activity = LoopActivity(self.committer, lambda: bool(self._unwritten))
        self.loop: asyncio.AbstractEventLoop | None = None
        #: topics with appends not yet written (an ordered set): written once per loop turn
        self._unwritten: dict[Topic, None] = {}
        self._last_append_error: tuple[str, float] | None = None
        #: a cluster's broker: whether its metadata store session still lets it acknowledge
        #: (checked after the fsync, before the receipts); None on a standalone broker
        self.may_acknowledge: Callable[[], bool] | None = None
        #: a cluster's broker: whether this writer still holds the ledger (opened under the
        #: current session, not fenced by another broker); None on a standalone broker
        self.ledger_may_acknowledge: Callable[[ManagedLedger], bool] | None = None

    def publish(self, topic: Topic, producer: Producer, sends: Sequence[RawSend]) -> int:
        """Core judges and appends a prefix of one producer's sends (see
        :func:`~magnetar.core.topics.publish.publish`); this writes the appends. How many
        sends were taken; raises for the first when it is refused."""
        if self.may_acknowledge is not None and not self.may_acknowledge():
            # written now, an entry could lie past the end a successor already read of this
            # ledger (this broker paused past its session): it would be found there by the
            # next load although its producer, never answered, sent it again
            raise ServiceNotReady("this broker's metadata store session is not valid; look up the topic again")
        taken, positions = publish.publish(topic, producer, sends, now_ms(), self._disk)
        if positions:
            self._appended(topic, positions)
        return taken

    def _appended(self, topic: Topic, positions: Sequence[Position]) -> None:
        self._recorder.appended(topic.ledger.name, positions)
        if topic.name.persistent:
            self.append_done(topic)
            return
        last = topic.ledger.last_position()  # in memory: durable as it is appended
        if last is not None:
            self._recorder.persisted(topic.ledger.name, last)
            topic.on_persisted(last, now_ms())

    def append_done(self, topic: Topic) -> None:
        """A topic appended entries: written once the connection's read is handled
        (:meth:`write_appends`), at the latest when this loop turn is over."""
        if topic in self._unwritten:
            return
        self._unwritten[topic] = None
        if len(self._unwritten) == 1:
            if self.loop is not None and not self.loop.is_closed():
                self.loop.call_soon(self._write)
            else:
                self._write()

    def write_appends(self) -> None:
        """Write what the SENDs handled so far appended."""
        if self._unwritten:
            self._write()

    def _write(self) -> None:
        unwritten, self._unwritten = self._unwritten, {}
        for topic in unwritten:
            try:
                topic.ledger.flush()
            except AppendFailed as exc:
                self._log_append_failure(exc)
                topic.appends_taken_back(exc.position, exc.reason)
            except LedgerClosed:
                continue  # unloaded or deleted meanwhile: its receipts went with it
            self.committer.mark_dirty(topic.ledger)

    def _log_append_failure(self, exc: AppendFailed) -> None:
        """Once per reason a minute: a full disk fails every append, and the log must not
        fill what is left of it."""
        now = monotonic_ms() / 1000
        last = self._last_append_error
        if last is None or last[0] != exc.reason or now - last[1] >= 60:
            self._last_append_error = (exc.reason, now)
            log.error("%s (repeats of this failure are logged once a minute)", exc)

    def _on_sync_error_from_thread(self, ledger: ManagedLedger, exc: Exception) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_sync_failed, ledger, exc)

    def _on_sync_failed(self, ledger: ManagedLedger, exc: Exception) -> None:
        """A ledger that cannot sync cannot promise anything more: the sends waiting on it
        get an error (rather than waiting for ever), and the topic is unloaded."""
        topic = self._topics.get(ledger.name)
        if topic is None or topic.ledger is not ledger:
            return
        log.error("sync of %s failed, unloading it: %s", ledger.name, exc)
        if topic.pending_receipts:
            topic.appends_taken_back(topic.pending_receipts[0].pos, f"the write could not be made durable ({exc})")
        self._unload(topic)

    def _on_synced_from_thread(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            self.activity.reports_posted += 1
            loop.call_soon_threadsafe(self._on_synced_report, synced)

    def _on_synced_report(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        self.activity.reports_handled += 1
        self.on_synced(synced)
        self.activity.settled()

    def on_synced(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        """Entries up to each position are durable: receipts, then dispatch."""
        now = now_ms()
        if self.may_acknowledge is not None and not self.may_acknowledge():
            self._refuse_receipts(synced)
            return
        held = self.ledger_may_acknowledge
        if held is not None and not all(held(ledger) for ledger, _ in synced):
            self._refuse_receipts([(ledger, pos) for ledger, pos in synced if not held(ledger)])
            synced = [(ledger, pos) for ledger, pos in synced if held(ledger)]
        for ledger, pos in synced:
            topic = self._topics.get(ledger.name)
            if topic is not None and topic.ledger is ledger:
                self._recorder.persisted(ledger.name, pos)
                topic.on_persisted(pos, now)

    def _refuse_receipts(self, synced: list[tuple[ManagedLedger, Position]]) -> None:
        """The session that lets this broker acknowledge is no longer valid: another broker
        may own these topics by now, so nothing more is acknowledged; the producers get a
        retriable error and the topics are unloaded (their clients look up again)."""
        log.warning("the metadata store session is not valid, or the ledger was fenced: receipts refused on "
                    "%d ledgers", len(synced))
        for ledger, _ in synced:
            topic = self._topics.get(ledger.name)
            if topic is None or topic.ledger is not ledger:
                continue
            if topic.pending_receipts:
                topic.appends_taken_back(topic.pending_receipts[0].pos,
                                         "this broker's metadata store session is not valid")
            self._unload(topic)
