"""Admission control for ``maxRecordsPerTrigger``: where does the next N messages end?

Offsets are message ids, and the broker's REST API tells only the last one, so the
only exact way to move N messages forward is to read them. The driver does that
with Readers (non-durable, closed at once) and shares the budget fairly: every
topic partition with a backlog gets an equal share, and what one cannot use goes
to the others.
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
            walks = {tp: _PartitionWalk(client, tp, ends[tp], latest[tp], max_rows) for tp in active}
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


class _PartitionWalk:
    def __init__(self, client: Any, topic: str, start: MessagePosition, latest: MessagePosition,
                 max_rows: int) -> None:
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
