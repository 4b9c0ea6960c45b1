"""Topic compaction in the broker (Pulsar's ``PersistentTopic.triggerCompaction`` with the
compactor service and ``CompactedTopicImpl.newCompactedLedger``).

A compaction, triggered by the admin API or by the threshold check on the broker's one
timer, runs in four steps:

1. on the event loop: note the horizon (the last durable entry) and take a detached scan
   of the topic from the previous horizon to it, plus the previous compacted view;
2. on an executor thread: both phases of :mod:`magnetar.core.compaction.compactor` and the new view's
   file, fsynced and renamed into place (the loop keeps serving meanwhile);
3. on the event loop: move the ``__compaction`` cursor to the horizon and name the new
   view in its ``CompactedTopicLedger`` property, one cursor record written in one store
   transaction by the metadata writer;
4. once that is durable: serve the new view, then delete the previous file.

A crash anywhere leaves the store naming a complete view: the old one before step 3 is
durable, the new one after. The file the store does not name is removed when the topic
loads next (:meth:`TopicCompaction.restore`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from magnetar.core.compaction import compaction_cursor
from magnetar.core.compaction.compactor import CompactionResult, compact
from magnetar.core.positions import Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic
from magnetar.server.clock import now_ms
from magnetar.storage.compacted_ledger import CompactedLedger, CompactedLedgerStorage
from magnetar.storage.interfaces import StorageError

if TYPE_CHECKING:
    from magnetar.server.broker_shell import BrokerShell

log = logging.getLogger("magnetar.compaction")


class TopicCompaction:
    def __init__(self, broker: BrokerShell) -> None:
        self.broker = broker
        self.storage = CompactedLedgerStorage(broker.data_dir / "compacted")
        #: the running compactions, held so that their tasks are not collected midway
        self._running: dict[Topic, asyncio.Task[None]] = {}

    def start(self, now: int) -> None:
        """The threshold check, every ``brokerServiceCompactionMonitorIntervalInSeconds``."""
        period_ms = max(1, round(self.broker.config.brokerServiceCompactionMonitorIntervalInSeconds * 1000))
        self.broker.core.sweep(period_ms, self._check_thresholds).start(now)

    def _check_thresholds(self, now: int, topics: Sequence[Topic]) -> None:
        for topic in self.broker.core.topics_to_compact(topics):
            log.info("compacting %s: its backlog passed the compaction threshold", topic.name)
            self.trigger(topic)

    # -- loading -------------------------------------------------------------------------
    def restore(self, topic: Topic) -> None:
        """Serve the view the stored ``__compaction`` cursor names; remove any other file."""
        name = str(topic.name)
        sub = compaction_cursor.compaction_subscription(topic)
        ledger_id = compaction_cursor.named_ledger(sub)
        for path in self.storage.sweep(name, keep=ledger_id):
            log.info("%s: removed %s, a compacted view no cursor names (an interrupted compaction)", name, path)
        if sub is None or ledger_id is None:
            return
        try:
            view = self.storage.open(name, ledger_id)
        except (OSError, StorageError) as exc:
            # the next compaction rebuilds it; until then readCompacted reads the topic
            log.error("%s: cannot open compacted ledger %d: %s", name, ledger_id, exc)
            topic.compacted.failed(f"compacted ledger {ledger_id} cannot be read: {exc}", now_ms())
            return
        topic.compacted.restore(sub.cursor.mark_delete, view)

    def release(self, topic: Topic) -> None:
        topic.compacted.close()

    def delete(self, topic_name: str) -> None:
        """The topic is deleted: its views with it (called off the event loop)."""
        self.storage.delete_topic(topic_name)

    # -- compacting ----------------------------------------------------------------------
    def trigger(self, topic: Topic) -> asyncio.Task[None]:
        """Start compacting; raises ``CompactionAlreadyRunning`` while one runs."""
        topic.compacted.begin(now_ms())
        task = asyncio.ensure_future(self._compact(topic))
        self._running[topic] = task
        task.add_done_callback(lambda _: self._running.pop(topic, None))
        return task

    async def _durable_end(self, topic: Topic) -> Position | None:
        """The horizon: the last entry appended when compaction began, once it is durable.

        Pulsar's backlog counts only confirmed entries; here a threshold can be passed by
        entries whose sync is still under way, and compacting up to the last durable entry
        then would leave exactly them out (an empty compaction reported as a success).
        The wait is for the group commit's round that covers the horizon to be reported
        (:meth:`GroupCommitter.flush` returns after its report is posted to the loop, so
        the topic has heard of it when the wait ends); a topic whose sync fails is unloaded,
        which ends it.
        """
        target = topic.ledger.last_position()
        loop = asyncio.get_running_loop()
        while target is not None and (topic.last_durable is None or topic.last_durable < target):
            if self.broker.topics.get(str(topic.name)) is not topic:
                break
            self.broker.appends.write_appends()
            await loop.run_in_executor(None, self.broker.committer.flush)
        return topic.last_durable

    async def _compact(self, topic: Topic) -> None:
        try:
            await self._run(topic)
        except Exception as exc:  # the status says why; the broker and the topic go on
            log.error("compaction of %s failed", topic.name, exc_info=exc)
            topic.compacted.failed(f"{type(exc).__name__}: {exc}", now_ms())

    async def _run(self, topic: Topic) -> None:
        horizon = await self._durable_end(topic)
        sub = compaction_cursor.ensure_subscription(topic)
        if horizon is None:
            topic.compacted.succeeded(topic.compacted.horizon, topic.compacted.view, 0, now_ms())
            return
        view, result = await self._write_view(topic, sub, horizon)
        if self.broker.topics.get(str(topic.name)) is not topic:
            await self._discard(topic, view)
            raise StorageError(f"{topic.name} was unloaded or deleted while being compacted")
        previous = compaction_cursor.name_view(sub, view.ledger_id, horizon)
        try:
            await asyncio.wrap_future(self.broker.cursors.persist_topic_cursors(topic))
        except Exception:
            compaction_cursor.put_back(sub, previous)
            await self._discard(topic, view)
            raise
        old = topic.compacted.succeeded(horizon, view, result.removed, now_ms())
        if old is not None:
            old.close()
            await asyncio.get_running_loop().run_in_executor(None, self.storage.delete, str(topic.name),
                                                             old.ledger_id)

    async def _write_view(self, topic: Topic, sub: Subscription,
                          horizon: Position) -> tuple[CompactedLedger, CompactionResult]:
        """Steps 1 and 2: the new view's file, complete and durable."""
        old_view = topic.compacted.view
        after = compaction_cursor.scan_start(sub, old_view is not None)
        topic_part = topic.ledger.detached_scan(after, horizon)
        await self.broker.ledger_ids.at_hand()  # no block reserved on the event loop
        ledger_id = self.broker.ledger_ids.next_id()
        retain_null_key = self.broker.config.topicCompactionRetainNullKey
        result = CompactionResult()

        def scan() -> Iterable[tuple[Position, bytes]]:
            previous = old_view.iter_entries() if old_view is not None else ()
            return itertools.chain(previous, topic_part)

        def work() -> CompactedLedger:
            return self.storage.write(str(topic.name), ledger_id, compact(scan, retain_null_key, result))

        view = await asyncio.get_running_loop().run_in_executor(None, work)
        return view, result

    async def _discard(self, topic: Topic, view: CompactedLedger) -> None:
        view.close()
        await asyncio.get_running_loop().run_in_executor(None, self.storage.delete, str(topic.name), view.ledger_id)

