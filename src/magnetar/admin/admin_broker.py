"""The broker as the admin REST API sees it: core's facade
(:class:`~magnetar.core.broker.broker_facade.AdminFacade`), plus what only an HTTP answer
needs of the broker's outer layers: the metadata store it reads and writes, the
authentication service, the entry cache's budget, how busy the event loop is, the writes
an answer waits on before it goes out, and the writer that makes writes off the event loop.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Protocol, TypeVar

from magnetar.admin.loop_lag_metrics import LoopLagReadings
from magnetar.admin.scrape_pacing import Activity
from magnetar.core.broker.broker_facade import AdminFacade
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.schemas.topic_schemas import SchemaHistory
from magnetar.core.topics.topic import Topic
from magnetar.security.authentication import AuthenticationService
from magnetar.storage.entry_cache_budget import EntryCacheBudget

T = TypeVar("T")


class SchemaRegistry(SchemaHistory, Protocol):
    def written(self) -> concurrent.futures.Future[None]:
        """Done once the schema writes made so far are durable."""


class MetadataWrites(Protocol):
    def submit(self, write: Callable[[BrokerMetadataStore], T]) -> concurrent.futures.Future[T]:
        """``write`` applied off the event loop, in order with the broker's other metadata
        writes; done once it is durable."""


class LedgerFactory(Protocol):
    @property
    def cache_budget(self) -> EntryCacheBudget | None: ...


class AdminBroker(AdminFacade, Protocol):
    @property
    def metadata(self) -> BrokerMetadataStore: ...

    @property
    def writer(self) -> MetadataWrites: ...

    @property
    def loop_lag(self) -> LoopLagReadings: ...

    @property
    def schemas(self) -> SchemaRegistry: ...

    @property
    def authentication(self) -> AuthenticationService | None:
        """None while ``authenticationEnabled`` is false."""

    @property
    def ledger_factory(self) -> LedgerFactory: ...

    @property
    def activity(self) -> Activity: ...

    def metadata_durable(self) -> concurrent.futures.Future[None]:
        """Done once every metadata write made so far is durable."""

    async def load_topic(self, name: TopicName, create: bool) -> Topic:
        """The loaded topic, else loaded with its store calls and ledger opening off the
        event loop (loads of one topic share one attempt)."""
