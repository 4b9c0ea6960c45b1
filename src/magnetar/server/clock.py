"""The one place the server reads the wall clock; core gets ``now_ms`` from here."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> float:
    """For measuring how long something took (never goes back with the wall clock)."""
    return time.monotonic_ns() / 1_000_000

