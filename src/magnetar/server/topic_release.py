"""Letting go of a loaded topic: unloading it (its clients reconnect and load it again)
or deleting it with its data, and removing the files of ledgers retention detached.

A topic being released is fenced at once and stays in ``unloading`` until its files are
closed, so nothing reopens it half-way. Detached ledgers' files go only once the
cursors that moved past them are durable, so after a crash no stored cursor stands in a
removed ledger; unlinks and directory syncs run on a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from functools import partial
from typing import Any, Protocol

from magnetar.core.broker.broker_timers import BrokerTimers
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.topics import topic_activity
from magnetar.core.topics.handover import DeliveryDrain, held_messages
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.core.topics.topic import Topic
from magnetar.server.appends import Appends
from magnetar.server.broker_stats import BrokerStatsRecorder
from magnetar.server.clock import now_ms
from magnetar.server.compaction import TopicCompaction
from magnetar.server.cursor_persistence import CursorPersistence
from magnetar.server.long_lived_objects import LongLivedObjects
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.server.schemas import SchemaRegistry
from magnetar.storage.metadata_calls import metadata_call
from magnetar.storage.segment_ledger import SegmentLedgerFactory

log = logging.getLogger("magnetar.broker")


class ReleaseShell(Protocol):
    """What a release touches of the broker service."""

    topics: LoadedTopics
    metadata: BrokerMetadataStore
    writer: MetadataWriter
    schemas: SchemaRegistry
    recorder: BrokerStatsRecorder
    long_lived: LongLivedObjects
    ledger_factory: SegmentLedgerFactory
    compaction: TopicCompaction
    cursors: CursorPersistence
    appends: Appends

    @property
    def timers(self) -> BrokerTimers: ...


class TopicRelease:
    def __init__(self, shell: ReleaseShell) -> None:
        self._shell = shell
        #: topics being unloaded or deleted: not reopened until that finishes
        self.unloading: set[str] = set()
        #: topic -> the removal of its detached ledgers' files, while one runs
        self._removals: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    def background(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``work`` on the loop; a failure is logged with ``what``."""
        def logged(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s failed", what, exc_info=task.exception())
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(logged)

    def unload_in_background(self, topic: Topic, why: str) -> None:
        if str(topic.name) not in self.unloading:
            self.background(self.release(topic, delete_data=False), f"unloading {why}{topic.name}")

    async def release(self, topic: Topic, delete_data: bool) -> None:
        shell, key = self._shell, str(topic.name)
        held = key in self.unloading  # by a deletion, which holds it until its record is gone
        self.unloading.add(key)
        try:
            topic.fenced = True
            topic_activity.close_all_clients(topic)
            shell.topics.pop(key, None)
            shell.long_lived.released()
            await asyncio.get_running_loop().run_in_executor(None, shell.appends.committer.flush)
            if not delete_data:
                await asyncio.wrap_future(shell.cursors.persist_topic_cursors(topic, force=True))
            await self._finish_removal(topic, delete_data)
            if topic.delayed is not None:
                topic.delayed.release(topic, delete_data)
            # closing syncs and deleting removes a directory: off the event loop
            release = topic.ledger.delete if delete_data else topic.ledger.close
            await asyncio.get_running_loop().run_in_executor(None, release)
            shell.compaction.release(topic)
            if delete_data:
                await asyncio.get_running_loop().run_in_executor(None, shell.compaction.delete, key)
        finally:
            if not held:
                self.unloading.discard(key)

    async def unload_topic(self, name: TopicName, drain_ms: int = 0) -> bool:
        """Close every client and release the topic; it is reopened on next use. With
        ``drain_ms`` (a move to another broker), consumers are first given that long to
        acknowledge what they were sent (:mod:`magnetar.core.topics.handover`)."""
        topic = self._shell.topics.get(str(name))
        if topic is None:
            return False
        if drain_ms > 0 and held_messages(topic) > 0:
            await self._drain(topic, drain_ms)
        await self.release(topic, delete_data=False)
        return True

    async def _drain(self, topic: Topic, drain_ms: int) -> None:
        drained: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        def done(ok: bool) -> None:
            if not drained.done():
                drained.set_result(ok)
        started = now_ms()
        DeliveryDrain(topic, self._shell.timers, started + drain_ms, done).start(started)
        if await drained:
            log.info("%s: its consumers acknowledged what they held in %d ms", topic.name, now_ms() - started)
        else:
            log.info("%s: its consumers still held %d messages after %d ms; they are redelivered by the next owner",
                     topic.name, held_messages(topic), drain_ms)

    async def unload_namespace(self, namespace: str) -> None:
        """Unload every loaded topic of the namespace; clients reconnect and load them again."""
        for topic in [t for t in self._shell.topics.values() if t.name.namespace_name == namespace]:
            await self.unload_topic(topic.name)

    async def delete_topic(self, name: TopicName) -> None:
        """Remove the topic, its data, cursors and schemas; clients are disconnected.

        The topic stays in ``unloading`` until its record is gone: a request meanwhile (a
        lookup, an admin read) would otherwise load it again from that record, empty, and
        it would live on after its deletion."""
        shell, key = self._shell, str(name)
        self.unloading.add(key)
        try:
            topic = shell.topics.get(key)
            if topic is not None:
                await self.release(topic, delete_data=True)
            elif name.persistent and await metadata_call(shell, lambda store: store.get_topic(key)) is not None:
                unloaded = shell.ledger_factory.open(key)
                await asyncio.get_running_loop().run_in_executor(None, unloaded.delete)
                await asyncio.get_running_loop().run_in_executor(None, shell.compaction.delete, key)
            await asyncio.wrap_future(shell.writer.submit(lambda store: store.delete_cursors(key)))
            if name.partition_index < 0:
                shell.schemas.delete_all(name)
            await metadata_call(shell, partial(_delete_records, key=key, policies=name.partition_index < 0))
            shell.recorder.forget_topic(key)
        finally:
            self.unloading.discard(key)

    async def delete_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        """Delete every partition, then the partitioned topic's metadata."""
        for index in range(partitions):
            await self.delete_topic(name.partition(index))
        shell = self._shell
        shell.schemas.delete_all(name)  # partitions share their parent's schemas
        await metadata_call(shell, partial(_delete_partitioned_records, key=str(name)))

    # -- ledgers retention detached ----------------------------------------------------
    def remove_detached(self, topic: Topic, detached: list[int]) -> None:
        """Retention detached ledgers of ``topic``: their files go once the cursors that
        moved past them are durable."""
        log.info("retention of %s deletes ledgers %s", topic.name, detached)
        if self.loop is None:
            topic.ledger.remove_detached()
            return
        key = str(topic.name)
        written = asyncio.wrap_future(self._shell.cursors.persist_topic_cursors(topic))
        work = asyncio.ensure_future(_remove_files(topic, written))
        self._removals[key] = work
        work.add_done_callback(lambda done: self._removal_done(key, done))

    def _removal_done(self, key: str, done: asyncio.Future[None]) -> None:
        if self._removals.get(key) is done:
            del self._removals[key]
        if not done.cancelled() and done.exception() is not None:
            log.error("removing the deleted ledgers of %s failed (they go at the next removal)", key,
                      exc_info=done.exception())

    async def _finish_removal(self, topic: Topic, delete_data: bool) -> None:
        """Before a topic's files are closed, retention is applied once more (an unloaded
        topic is not checked), and every removal of its files has finished."""
        if topic.name.persistent and not delete_data:
            detached = topic.apply_retention(now_ms())
            if detached:
                self.remove_detached(topic, detached)
        pending = self._removals.get(str(topic.name))
        if pending is not None:
            await asyncio.wait([pending])

    async def removals_done(self) -> None:
        if self._removals:
            await asyncio.wait(list(self._removals.values()))


async def _remove_files(topic: Topic, written: asyncio.Future[None]) -> None:
    await written
    await asyncio.get_running_loop().run_in_executor(None, topic.ledger.remove_detached)


def _delete_records(store: BrokerMetadataStore, key: str, policies: bool) -> None:
    if policies:
        store.delete_topic_policies(key)
    store.delete_topic(key)


def _delete_partitioned_records(store: BrokerMetadataStore, key: str) -> None:
    store.delete_partitioned_topic(key)
    store.delete_topic_policies(key)
