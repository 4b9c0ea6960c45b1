"""Admission control for ``maxRecordsPerTrigger``: where does the next N messages end?

Offsets are message ids, and the broker's REST API tells only the last one, so the
only exact way to move N messages forward is to read them. The driver does that
with Readers (non-durable, closed at once) and shares the budget fairly: every
topic partition with a backlog gets an equal share, and what one cannot use goes
to the others.

Every wait has an end: a read that returns nothing while the broker says messages are
available is retried for ``pollTimeoutMs`` (one try a second), then the planning fails
with what it saw, rather than looping for ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.spark.offsets import EARLIEST, MessagePosition
from magnetar.spark.options import SourceOptions
from magnetar.spark.reading import READ_WAIT_MS, reader_start


class BacklogWalker:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def advance(self, starts: Mapping[str, MessagePosition], latest: Mapping[str, MessagePosition],
                max_rows: int) -> dict[str, MessagePosition]:
        """End positions at most ``max_rows`` messages after ``starts`` in total, never past ``latest``."""

        ends = {tp: starts.get(tp, EARLIEST) for tp in latest}
        active = sorted(tp for tp in latest if latest[tp] > ends[tp])
        if not active:
            return ends
        client = self.options.connection.new_client()
        try:
            tries = max(1, self.options.poll_timeout_ms // READ_WAIT_MS)
            walks = {tp: _PartitionWalk(client, tp, ends[tp], latest[tp], max_rows, tries) for tp in active}
            budget = max_rows
            while budget > 0 and active:
                share = max(1, budget // len(active))
                for tp in list(active):
                    if budget <= 0:
                        break
                    walk = walks[tp]
                    budget -= walk.advance(min(share, budget))
                    if walk.done:
                        active.remove(tp)
            for tp, walk in walks.items():
                ends[tp] = walk.end
        finally:
            client.close()
        return ends


class BacklogWalkTimeout(TimeoutError):
    """Reads returned nothing although the broker kept reporting messages available."""


class _PartitionWalk:
    def __init__(self, client: Any, topic: str, start: MessagePosition, latest: MessagePosition,
                 max_rows: int, tries: int) -> None:
        self.topic = topic
        self.start = start
        self.latest = latest
        self.tries = tries
        self.empty_reads = 0
        self.start_key = start.sort_key
        self.latest_key = latest.sort_key
        self.end = start
        self.done = False
        queue = max(1, min(max_rows + 1, 10_000))
        self.reader = client.create_reader(topic, reader_start(start), start_message_id_inclusive=True,
                                           receiver_queue_size=queue)

    def advance(self, rows: int) -> int:
        """Move the end up to ``rows`` messages forward; returns how many it moved."""
        import pulsar
        moved = 0
        while moved < rows and not self.done:
            try:
                msg = self.reader.read_next(READ_WAIT_MS)
            except pulsar.Timeout:
                if not self.reader.has_message_available():
                    self.done = True
                    continue
                self.empty_reads += 1
                if self.empty_reads >= self.tries:
                    raise BacklogWalkTimeout(self._stuck()) from None
                continue
            self.empty_reads = 0
            mid = msg.message_id()
            position = MessagePosition(mid.ledger_id(), mid.entry_id(), mid.batch_index())
            key = position.sort_key
            if key <= self.start_key:
                continue
            if key > self.latest_key:
                self.done = True
                break
            self.end = position
            moved += 1
            if key == self.latest_key:
                self.done = True
        return moved

    def _stuck(self) -> str:
        reached = "nothing read" if self.end == self.start else f"read up to {self.end}"
        return (f"planning the next micro-batch of {self.topic}: {self.empty_reads} reads of {READ_WAIT_MS} ms "
                f"returned no message although the broker kept reporting messages available ({reached}, "
                f"after {self.start}; the topic's last message is {self.latest}). Is the broker overloaded, or "
                "were the messages deleted? pollTimeoutMs sets how long to wait")
