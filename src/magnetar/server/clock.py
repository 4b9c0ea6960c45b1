"""The one place the server reads the wall clock; core gets ``now_ms`` from here."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
