"""Waiting for something that another process or thread brings about, with an end.

Tests and benches check a broker from outside: a receipt, a trimmed ledger, a registration.
There is no event to wait on across a process boundary, so they poll, and every poll has a
deadline; a wait that passes it fails, naming what was awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

V = TypeVar("V")


class NotReached(AssertionError):
    """What was awaited did not come about in time (an assertion: tests fail on it)."""


def wait_until(predicate: Callable[[], V], timeout_s: float = 10.0, what: str = "condition",
               interval_s: float = 0.02) -> V:
    """Poll until ``predicate`` returns something truthy and return it; raise
    :class:`NotReached` once ``timeout_s`` has passed without."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise NotReached(f"{what} not reached within {timeout_s} s")
        time.sleep(interval_s)
