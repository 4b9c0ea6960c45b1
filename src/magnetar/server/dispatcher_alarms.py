"""Wall-clock alarms for dispatchers that defer work (Key_Shared's batched unblocking).

A Key_Shared dispatcher retries deliveries blocked by draining hashes once per
``keySharedUnblockingIntervalMs`` rather than on every acknowledgement; it asks for
a wake-up at a deadline and this module calls its ``on_timer`` then, on the event
loop. One pending alarm per dispatcher: an earlier deadline replaces a later one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.server.clock import now_ms

if TYPE_CHECKING:
    from magnetar.core.dispatchers.key_shared import KeySharedDispatcher

log = logging.getLogger(__name__)


class DispatcherAlarms:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[KeySharedDispatcher, tuple[int, asyncio.TimerHandle]] = {}

    def arm(self, dispatcher: KeySharedDispatcher, deadline_ms: int) -> None:
        """Call ``dispatcher.on_timer`` at ``deadline_ms`` (at once without a running loop)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            self._fire(dispatcher)
            return
        armed = self._pending.get(dispatcher)
        if armed is not None:
            if armed[0] <= deadline_ms:
                return
            armed[1].cancel()
        delay_s = max(0, deadline_ms - now_ms()) / 1000
        self._pending[dispatcher] = (deadline_ms, loop.call_later(delay_s, self._ring, dispatcher))

    def _ring(self, dispatcher: KeySharedDispatcher) -> None:
        self._pending.pop(dispatcher, None)
        self._fire(dispatcher)

    @staticmethod
    def _fire(dispatcher: KeySharedDispatcher) -> None:
        try:
            dispatcher.on_timer(now_ms())
        except Exception:
            log.exception("dispatcher timer failed")

    def cancel_all(self) -> None:
        for _, handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
