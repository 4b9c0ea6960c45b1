"""Whether the event loop has clients' work in hand, for background work that should use
the loop only while it has none.

A ``/metrics`` scrape reads live state on the event loop, a slice of topics at a time
(:mod:`magnetar.admin.scrape_pacing`). Slices on a timer land inside publishes: the timer
is due when the loop next wakes, and the loop wakes for a publish, so a slice began right
after a SEND was taken in and held up its sync's report or the next SEND. Two more things
made a slice cost a publish more than its length. The syncing thread, its ``fdatasync``
done, waits for the interpreter lock the slice holds. And the client itself, woken by a
receipt on the core the loop runs on, could wait there for the slice to end.

So a slice starts only when this says the loop is idle (no client bytes unread, no sync
running or reported and not yet handled, no replies gathered and not written), and ends
as soon as it is not (looked at between topics), and runs for at most a millisecond.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable
from typing import Protocol


class Committer(Protocol):
    @property
    def idle(self) -> bool:
        """Nothing marked for a sync and no round running."""


class LoopActivity:
    """Client work the loop has in hand. Sockets are watched by their descriptors in an
    epoll set of its own (level-triggered: readable while bytes wait unread); the counts
    of sync reports are each written by one thread only."""

    def __init__(self, committer: Committer, appends_waiting: Callable[[], bool]) -> None:
        self._committer = committer
        self._appends_waiting = appends_waiting
        self._readable = select.epoll()
        #: descriptor -> the connection that watches it (a closed socket's number is reused)
        self._watchers: dict[int, object] = {}
        #: connections whose gathered replies are scheduled to be written
        self.replies_waiting: set[object] = set()
        #: sync reports handed to the loop (by the syncing thread) and handled on it
        self.reports_posted = 0
        self.reports_handled = 0
        self._settled: asyncio.Future[None] | None = None

    def watch(self, fd: int, watcher: object) -> None:
        try:
            self._readable.register(fd, select.EPOLLIN)
        except FileExistsError:  # left by a socket closed under the same number
            self._readable.modify(fd, select.EPOLLIN)
        except OSError:
            return
        self._watchers[fd] = watcher

    def unwatch(self, fd: int, watcher: object) -> None:
        if self._watchers.get(fd) is not watcher:
            return
        del self._watchers[fd]
        try:
            self._readable.unregister(fd)
        except (OSError, ValueError):
            pass  # the socket closed already (the kernel dropped it from the set), or the set itself

    def close(self) -> None:
        self._readable.close()

    def busy(self) -> bool:
        return (self.reports_posted != self.reports_handled or not self._committer.idle
                or bool(self.replies_waiting) or self._appends_waiting()
                or bool(self._readable.poll(0)))

    def settled(self) -> None:
        """The loop handled a sync's report: the moment a slice waiting for quiet may go."""
        waiter, self._settled = self._settled, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_settled(self, timeout_s: float) -> None:
        """Until the next sync report is handled, or ``timeout_s``."""
        if self._settled is None or self._settled.done():
            self._settled = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._settled), timeout_s)
        except TimeoutError:
            pass
