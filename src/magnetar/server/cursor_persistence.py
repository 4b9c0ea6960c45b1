"""Durable cursors written off the event loop, in order, by the metadata writer's thread.

Core decides which cursors changed since their last write (``BrokerCore.cursor_writes``);
this hands them to the writer and tells core again when a write failed, so that those
cursors are written at the next persist. The shared delayed index's snapshot is a
cursor too and goes with its topic's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from magnetar.core.broker.broker_core import BrokerCore, CursorWrite
from magnetar.core.topics.topic import Topic
from magnetar.server.clock import now_ms
from magnetar.server.metadata_writer import MetadataWriter

log = logging.getLogger("magnetar.broker")


class CursorPersistence:
    def __init__(self, core: BrokerCore, writer: MetadataWriter,
                 persist_index: Callable[[Topic, bool], object], shared_index: bool) -> None:
        self._core = core
        self._writer = writer
        #: writes a topic's shared delayed index when it changed (every one with force)
        self._persist_index = persist_index
        self._shared_index = shared_index
        self.loop: asyncio.AbstractEventLoop | None = None

    def persist_cursors(self, force: bool = False) -> concurrent.futures.Future[None]:
        """Write changed durable cursors (every one with ``force``) off the event loop."""
        if self._shared_index:
            for topic in self._core.topics.values():
                self._persist_index(topic, force)
        return self._write(self._core.cursor_writes(force=force, now_ms=now_ms()))

    def persist_topic_cursors(self, topic: Topic, force: bool = False) -> concurrent.futures.Future[None]:
        """Write one topic's changed cursors; the future is done once they are durable."""
        self._persist_index(topic, force)
        return self._write(self._core.cursor_writes([topic], force=force, now_ms=now_ms()))

    async def store_cursors(self, topic: Topic) -> None:
        """Persist a topic's changed cursors and wait until they are durable."""
        await asyncio.wrap_future(self.persist_topic_cursors(topic))

    def delete_cursor(self, topic: Topic, name: str) -> None:
        if topic.name.persistent:
            self._writer.delete_cursor(str(topic.name), name)

    def _write(self, writes: list[CursorWrite]) -> concurrent.futures.Future[None]:
        future = self._writer.put_cursors((w.topic, w.name, w.record) for w in writes)
        if writes:
            def check(done: concurrent.futures.Future[None]) -> None:
                if done.exception() is not None:
                    log.error("writing %d cursors failed", len(writes), exc_info=done.exception())
                    self._core.cursor_write_failed(writes)
            future.add_done_callback(check)
        return future

    def on_loop(self, work: concurrent.futures.Future[Any],
                callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback`` with the error of ``work`` (None when it succeeded) on the
        event loop once the other thread is done with it."""
        def done(finished: concurrent.futures.Future[Any]) -> None:
            error = finished.exception()
            loop = self.loop
            if loop is None or loop.is_closed():
                callback(error)
            else:
                loop.call_soon_threadsafe(callback, error)
        work.add_done_callback(done)
