"""When a connection must stop being read: inbound back-pressure for publishers.

Appends are cheap to accept and slow to make durable, so a producer that pipelines
sends faster than the disk syncs them (or never reads its receipts) would otherwise
grow broker memory without bound. As in Pulsar, a connection stops being read once
it has ``maxPendingPublishRequestsPerConnection`` sends unanswered, and is read again
when half of them are answered; and all publishing connections stop while the bytes
of unanswered sends across the broker exceed ``maxMessagePublishBufferSizeInMB``,
until they fall to half of it.

Accounting is per producer, in send order: a producer's receipts come back in the
order of its sends, and a producer that goes away takes its unanswered sends with it,
so a send that is never answered (its producer closed first) cannot leak a count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False)
class PublishBuffer:
    """Bytes of sends accepted and not yet answered, across the broker."""

    limit_bytes: int
    pending_bytes: int = 0
    #: over the limit, and not yet back to half of it
    full: bool = False

    def add(self, size: int) -> None:
        self.pending_bytes += size
        if self.limit_bytes > 0 and self.pending_bytes > self.limit_bytes:
            self.full = True

    def release(self, size: int) -> bool:
        """Give back ``size`` bytes; True when this lifts a full buffer."""
        self.pending_bytes -= size
        if self.full and self.pending_bytes <= self.limit_bytes // 2:
            self.full = False
            return True
        return False


@dataclass(eq=False)
class PendingPublishes:
    """One connection's unanswered sends."""

    max_pending: int
    buffer: PublishBuffer
    count: int = 0
    _sizes: dict[int, deque[int]] = field(default_factory=dict)

    def sent(self, producer_id: int, size: int) -> None:
        sizes = self._sizes.get(producer_id)
        if sizes is None:
            sizes = self._sizes[producer_id] = deque()
        sizes.append(size)
        self.count += 1
        self.buffer.add(size)

    def answered(self, producer_id: int, count: int = 1) -> bool:
        """``count`` receipts or errors went out; True when the whole buffer just fell to half."""
        sizes = self._sizes.get(producer_id)
        if not sizes:
            return False
        count = min(count, len(sizes))
        self.count -= count
        popleft = sizes.popleft
        return self.buffer.release(sum(popleft() for _ in range(count)))

    def dropped(self, producer_id: int) -> bool:
        """The producer is gone: its unanswered sends no longer count."""
        sizes = self._sizes.pop(producer_id, None)
        if not sizes:
            return False
        self.count -= len(sizes)
        return self.buffer.release(sum(sizes))

    def release_all(self) -> bool:
        lifted = False
        for producer_id in list(self._sizes):
            lifted = self.dropped(producer_id) or lifted
        return lifted

    def should_pause(self) -> bool:
        return (self.max_pending > 0 and self.count >= self.max_pending) or self.buffer.full

    def may_resume(self) -> bool:
        return (self.max_pending <= 0 or self.count <= self.max_pending // 2) and not self.buffer.full
