"""Metadata store calls that must not wait on the event loop, made where the store allows.

A ZooKeeper store answers a cache miss or a write only after a round trip to the ensemble
(up to ``metadataStoreOperationTimeoutSeconds``); made on the event loop, one slow answer
would stall every connection of the broker. So on a cluster's broker such a call runs on
the metadata writer's thread, in order with the broker's other metadata writes (cursors,
schemas), and the caller awaits its result or exception. The standalone broker's SQLite
store answers at once and its commits are local (the writer's sync makes them durable); there
the call runs in place on the loop's own connection, whose writes the broker's caches count
(``policy_changes``), as it always did.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Protocol, TypeVar

from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.storage.metadata_stores import local_store

T = TypeVar("T")


class Writes(Protocol):
    def submit(self, write: Callable[[BrokerMetadataStore], T]) -> concurrent.futures.Future[T]:
        """``write`` applied off the event loop, in order; done once it is durable."""


class StoreHolder(Protocol):
    @property
    def metadata(self) -> BrokerMetadataStore: ...

    @property
    def writer(self) -> Writes: ...


def shared_store(holder: StoreHolder) -> bool:
    """Whether the store is shared by a cluster (ZooKeeper): its calls go off the loop."""
    return local_store(holder.metadata) is None


async def metadata_call(holder: StoreHolder, call: Callable[[BrokerMetadataStore], T]) -> T:
    """``call(store)``: on the metadata writer's thread when the store is shared, in place on
    the standalone broker's SQLite store."""
    if not shared_store(holder):
        return call(holder.metadata)
    return await asyncio.wrap_future(holder.writer.submit(call))
