"""The last mutable bucket: the delayed indexes of the ledgers being written now.

Pulsar's ``MutableBucket`` (PIP-195's LastMutableBucket). It holds a priority queue of the
indexes of ledgers ``start_ledger_id..end_ledger_id`` (the range grows as new ledgers
arrive) until the tracker seals it into an immutable bucket, and hands its due indexes to
the tracker's shared queue as time passes. It lives only in memory: after a restart its
messages come back by re-reading the ledgers, which the cursor does anyway.
"""

from __future__ import annotations

from magnetar.core.delayed.triple_long_priority_queue import TripleLongPriorityQueue, key_timestamp


class MutableBucket:
    __slots__ = ("start_ledger_id", "end_ledger_id", "_queue")

    def __init__(self) -> None:
        self.start_ledger_id = -1
        self.end_ledger_id = -1
        self._queue = TripleLongPriorityQueue()

    def __len__(self) -> int:
        return len(self._queue)

    def add_key(self, key: int, ledger_id: int) -> None:
        self._queue.add_key(key)
        if self.start_ledger_id == -1:
            self.start_ledger_id = ledger_id
        self.end_ledger_id = ledger_id

    def next_delivery_time_ms(self) -> int | None:
        return self._queue.peek_timestamp() if self._queue else None

    def move_scheduled_messages_to(self, shared_queue: TripleLongPriorityQueue, cutoff_ms: int) -> None:
        queue = self._queue
        while queue and key_timestamp(queue.peek_key()) <= cutoff_ms:
            shared_queue.add_key(queue.pop_key())

    def seal(self) -> tuple[list[int], int, int]:
        """Take every index (sorted) and the ledger range; the bucket starts over empty."""
        keys = self._queue.drain_sorted()
        sealed = (keys, self.start_ledger_id, self.end_ledger_id)
        self.reset_range()
        return sealed

    def reset_range(self) -> None:
        self.start_ledger_id = -1
        self.end_ledger_id = -1

    def clear(self) -> None:
        self.reset_range()
        self._queue.clear()

    def bytes_capacity(self) -> int:
        return self._queue.bytes_capacity()
