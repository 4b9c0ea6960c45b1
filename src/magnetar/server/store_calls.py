"""The cluster's own thread pool for metadata store calls.

A ZooKeeper call blocks until the ensemble answers, so the cluster membership and the load
manager make every store call here, never on the event loop; the pool is the cluster's
alone, so a slow ensemble does not hold up the loop's default executor (ledger opens, TLS
handshakes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class StoreCalls:
    def __init__(self, workers: int = 4) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="magnetar-cluster")

    async def run(self, call: Callable[..., R], *args: Any) -> R:
        """``call(*args)`` on the pool; its result (or exception) once it is done."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, call, *args)
