"""Several deadlines of one owner as a single owner of the broker's one timer.

A connection keeps three: the keep-alive check (``keepAliveIntervalSeconds``), the
credential check (``authenticationRefreshCheckSeconds``) and the end of a publish
throttle. The deadline queue holds one deadline per owner, so a :class:`Deadlines` asks
for the earliest of its own and, when that comes due, runs every one of them that is due.

Each deadline is a name, a time and what to run then; setting a name again replaces its
deadline, later or earlier. :meth:`Deadlines.close` forgets them all, drops what they
would have run and ignores what is set after it, so an entry the queue still holds for a
closed owner keeps nothing alive.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.core.broker.broker_timers import BrokerTimers

Run = Callable[[int], None]


class Deadlines:
    def __init__(self, timers: BrokerTimers) -> None:
        self.timers = timers
        self._due: dict[str, tuple[int, Run]] = {}
        #: the deadline this owner holds in the queue, if any
        self._asked: int | None = None
        self.closed = False

    def set(self, name: str, at_ms: int, run: Run) -> None:
        """Run ``run(now_ms)`` at ``at_ms``, instead of what ``name`` was set to before."""
        if self.closed:
            return
        self._due[name] = (at_ms, run)
        self._ask()

    def cancel(self, name: str) -> None:
        if self._due.pop(name, None) is not None:
            self._ask()

    def pending(self, name: str) -> bool:
        return name in self._due

    def at_ms(self, name: str) -> int | None:
        due = self._due.get(name)
        return None if due is None else due[0]

    def close(self) -> None:
        self.closed = True
        self._due.clear()
        self._ask()

    def on_timer(self, now_ms: int) -> None:
        """The queue's call: what is due runs, earliest first; each may set itself again."""
        self._asked = None
        due = sorted(((at, name) for name, (at, _) in self._due.items() if at <= now_ms))
        try:
            for at, name in due:
                entry = self._due.get(name)
                if entry is None or entry[0] != at:
                    continue  # cancelled or moved by one that ran before it
                del self._due[name]
                entry[1](now_ms)
        finally:
            self._ask()

    def _ask(self) -> None:
        earliest = min((at for at, _ in self._due.values()), default=None)
        if earliest == self._asked:
            return
        self.timers.cancel(self)
        self._asked = earliest
        if earliest is not None:
            self.timers.wake_up(self, earliest)
