"""What the broker's one timer drives, and how its owners ask for time.

Every deadline of the broker's work is an owner in the
:class:`~magnetar.core.broker.deadline_queue.DeadlineQueue`, among them:

- Key_Shared dispatchers that defer unblocking (``keySharedUnblockingIntervalMs``) and
  dispatch rate limits: they ask for a wake-up at their next deadline;
- the delayed-delivery tick (``delayedDeliveryTickTimeMillis``): it runs once per tick,
  or sooner when a delayed message comes due before the tick;
- cursor persistence (``managedLedgerDefaultMarkDeleteRateLimit`` writes per second),
  which also stores due deduplication snapshots;
- periodic checks (:class:`PeriodicTask`: disk usage, TLS certificate files) and sweeps
  over the topics (:class:`~magnetar.core.broker.topic_sweep.TopicSweep`: retention,
  message expiry, backlog quotas, inactive topics and subscriptions, idle topics,
  compaction thresholds);
- each connection's keep-alive, credential check and publish throttle
  (:class:`~magnetar.core.broker.deadlines.Deadlines`).

The shell is told through ``alarm`` whenever the earliest deadline moves earlier, and
after :meth:`BrokerTimers.on_timer` it re-arms at :meth:`BrokerTimers.next_deadline_ms`.

Owners marked ``background`` (the topic sweeps) do work no client waits for. When the
shell says clients have work in hand as the timer rings, such an owner is put off by a
millisecond, for at most ``BACKGROUND_HOLD_MS`` in a row: a slice of a sweep run while a
publish's sync report waits for the loop held that publish for the slice and for the
syncing thread's wait for the interpreter lock after it. One ring runs one background
owner at most; the others due with it come a millisecond later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from magnetar.core.broker.deadline_queue import DeadlineQueue

#: The delayed-delivery tick never runs more often than this, whatever the config says.
MIN_DELAYED_TICK_MS = 10
#: the longest a background owner is put off while clients have work in hand
BACKGROUND_HOLD_MS = 5


class TimerOwner(Protocol):
    def on_timer(self, now_ms: int) -> None: ...


class BrokerTimers:
    def __init__(self, alarm: Callable[[int], None] | None = None) -> None:
        self.queue: DeadlineQueue[TimerOwner] = DeadlineQueue()
        #: told of every deadline earlier than the one armed (the shell's call_at)
        self.alarm = alarm
        self._armed: int | None = None
        #: owners whose on_timer raised, for the shell to log; core does not log
        self.failures: list[tuple[TimerOwner, Exception]] = []
        #: the owners the last on_timer ran, for the shell to name what a long ring did
        self.ran: list[TimerOwner] = []
        #: background owners put off, and since when
        self._held: dict[TimerOwner, int] = {}

    def wake_up(self, owner: TimerOwner, at_ms: int) -> None:
        self.queue.schedule(owner, at_ms)
        if self._armed is None or at_ms < self._armed:
            self._armed = at_ms
            if self.alarm is not None:
                self.alarm(at_ms)

    def cancel(self, owner: TimerOwner) -> None:
        self.queue.cancel(owner)
        self._held.pop(owner, None)

    def next_deadline_ms(self) -> int | None:
        return self.queue.next_deadline_ms()

    def on_timer(self, now_ms: int, clients_waiting: bool = False) -> int | None:
        """Run every owner that came due, but background owners while ``clients_waiting``
        (not for more than BACKGROUND_HOLD_MS in a row); the next deadline, for the shell
        to arm."""
        self._armed = None
        self.ran = due = self._runnable(self.queue.pop_due(now_ms), now_ms, clients_waiting)
        for owner in due:
            try:
                owner.on_timer(now_ms)
            except Exception as exc:  # one owner's bug must not stop the others' timers
                self.failures.append((owner, exc))
        self._armed = self.queue.next_deadline_ms()
        return self._armed

    def _runnable(self, due: list[TimerOwner], now_ms: int, clients_waiting: bool) -> list[TimerOwner]:
        """``due`` less the background owners that wait a millisecond more: all of them
        while clients have work in hand (each for BACKGROUND_HOLD_MS in a row at most), and
        all but one in any case (sweeps that start together ring together, and five slices
        in one ring held the loop 23 ms at 1,000 idle topics)."""
        runnable: list[TimerOwner] = []
        background_ran = False
        for owner in due:
            if getattr(owner, "background", False):
                if self._held_back(owner, now_ms, clients_waiting) or background_ran:
                    self.queue.schedule(owner, now_ms + 1)
                    continue
                background_ran = True
            runnable.append(owner)
        return runnable

    def _held_back(self, owner: TimerOwner, now_ms: int, clients_waiting: bool) -> bool:
        held_since = self._held.setdefault(owner, now_ms)
        if clients_waiting and now_ms - held_since < BACKGROUND_HOLD_MS:
            return True
        del self._held[owner]
        return False


@dataclass(eq=False)
class PeriodicTask:
    """An owner that runs every ``period_ms``; ``run`` may ask for an earlier next run
    by returning a time (never sooner than 1 ms from now, so a due item cannot spin)."""

    timers: BrokerTimers
    period_ms: int
    run: Callable[[int], int | None]

    def start(self, now_ms: int) -> None:
        self.timers.wake_up(self, now_ms + self.period_ms)

    def on_timer(self, now_ms: int) -> None:
        sooner = None
        try:
            sooner = self.run(now_ms)
        finally:
            at_ms = now_ms + self.period_ms
            if sooner is not None:
                at_ms = min(at_ms, max(sooner, now_ms + 1))
            self.timers.wake_up(self, at_ms)
