"""The metadata store on ZooKeeper: every concept of
:class:`~magnetar.core.metadata.interfaces.BrokerMetadataStore` over one kazoo session."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Self

from magnetar.core.metadata.store_url import ZooKeeperUrl
from magnetar.storage.metadata_checks import check_int
from magnetar.storage.zookeeper.records import (
    ZooKeeperAdmin,
    ZooKeeperCoordination,
    ZooKeeperCursors,
    ZooKeeperPoliciesAndKeys,
    ZooKeeperSchemas,
    ZooKeeperTopics,
)
from magnetar.storage.zookeeper.session import (
    DEFAULT_OPERATION_TIMEOUT_S,
    DEFAULT_SESSION_TIMEOUT_MS,
    ZooKeeperSession,
)


class ZooKeeperMetadataStore(ZooKeeperAdmin, ZooKeeperTopics, ZooKeeperCursors, ZooKeeperSchemas,
                             ZooKeeperPoliciesAndKeys, ZooKeeperCoordination):
    """Broker metadata in ZooKeeper at ``url`` (``zk:host:port[,host:port...][/chroot]``).

    Opening connects (or raises :class:`~magnetar.core.metadata.records.MetadataUnavailable`
    after ``operation_timeout_s``); ledger ids are reserved ``ledger_id_block`` at a time.
    """

    def __init__(self, url: ZooKeeperUrl | str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S, ledger_id_block: int = 64) -> None:
        self._ledger_id_block = check_int("ledger_id_block", ledger_id_block, 1)
        check_int("metadataStoreSessionTimeoutMillis", session_timeout_ms, 1)
        self._ledger_ids_lock = threading.Lock()
        self._next_ledger_id = self._reserved_until = 0
        self._zk = ZooKeeperSession(url, session_timeout_ms=session_timeout_ms,
                                    operation_timeout_s=operation_timeout_s)

    @property
    def url(self) -> ZooKeeperUrl:
        return self._zk.url

    @property
    def session_timeout_ms(self) -> int:
        """The session timeout asked for (the servers may grant another, within their bounds)."""
        return self._zk.session_timeout_ms

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session's id and password (what a test needs to expire it)."""
        return self._zk.client_id

    @property
    def operation_timeout_s(self) -> float:
        return self._zk.operation_timeout_s

    @property
    def topic_list_changes(self) -> int:
        """Writes made or seen that may change a list of stored topics (``paths.is_listing``)."""
        return self._zk.topic_list_changes

    @property
    def changes(self) -> int:
        """Writes made through this store or seen through its watches so far."""
        return self._zk.changes

    def close(self) -> None:
        self._zk.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


if TYPE_CHECKING:
    from magnetar.core.metadata.interfaces import BrokerMetadataStore

    _implements: type[BrokerMetadataStore] = ZooKeeperMetadataStore
