"""Ledger ids for the event loop, reserved ahead on the metadata writer's thread.

An id must never be handed out twice, even across a crash, so a block of ids is durable
before its first id is used. Reserving on the loop's own connection would mean an fsync
on the event loop every block; instead the next block is reserved on the writer's thread
while half the current one is still unused, and the loop only ever takes a block that is
already durable. A burst that uses up both before the writer answers falls back to a
reservation on the loop (durable too, only slower); a topic's load waits for the writer
instead (:meth:`LedgerIds.at_hand`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib

from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.storage.metadata_stores import local_store

Block = tuple[int, int]


class LedgerIds:
    def __init__(self, store: BrokerMetadataStore, writer: MetadataWriter, block: int = 64) -> None:
        """``store``: the loop's connection (used for the fallback); ``block``: ids per reservation."""
        self._store = store
        self._writer = writer
        self._block = block
        self._next = self._end = 0
        self._ahead: concurrent.futures.Future[Block] | None = None

    def next_id(self) -> int:
        if self._next >= self._end:
            self._next, self._end = self._take_block()
        ledger_id = self._next
        self._next += 1
        if self._ahead is None and self._end - self._next < self._block // 2:
            self._ahead = self._writer.submit(lambda store: store.reserve_ledger_ids(self._block))
        return ledger_id

    async def at_hand(self) -> None:
        """Once this returns, :meth:`next_id` hands out an id without a reservation on the
        loop: a used-up block waits for the one reserved ahead (asked for now if it was not)."""
        if self._next < self._end:
            return
        if self._ahead is None:
            self._ahead = self._writer.submit(lambda store: store.reserve_ledger_ids(self._block))
        with contextlib.suppress(Exception):  # a failed reservation is made again by next_id
            await asyncio.wrap_future(self._ahead)

    def restart_from(self, block: Block) -> None:
        """Hand out ids from ``block`` on, dropping what was reserved before it. A cluster's
        broker does this when it takes a bundle over: its own earlier reservations may be
        below the ids the previous owner used, and a topic's ledger ids must increase."""
        self._next, self._end = block
        self._ahead = None

    @property
    def block(self) -> int:
        return self._block

    def _take_block(self) -> Block:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.done() and ahead.exception() is None:
            return ahead.result()
        # not there yet (or failed): a block reserved here; one still coming is simply skipped
        block = self._store.reserve_ledger_ids(self._block)
        local = local_store(self._store)
        if local is not None:
            local.sync_log()
        return block
