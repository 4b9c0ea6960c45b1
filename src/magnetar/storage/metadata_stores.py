"""The metadata store a broker's config names: ZooKeeper at ``metadataStoreUrl``, or, with
no URL (the standalone broker), the SQLite store in the broker's data directory."""

from __future__ import annotations

from pathlib import Path

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore

#: the SQLite store's file in the data directory
SQLITE_FILE = "metadata.db"


def open_metadata_store(config: BrokerConfig, data_dir: Path) -> BrokerMetadataStore:
    url = config.metadata_store_url
    if url is None:
        return MetadataStore(data_dir / SQLITE_FILE)
    return ZooKeeperMetadataStore(url, session_timeout_ms=config.metadataStoreSessionTimeoutMillis,
                                  operation_timeout_s=config.metadataStoreOperationTimeoutSeconds)


def local_store(store: object) -> MetadataStore | None:
    """``store`` when it is the SQLite store, whose commits the broker syncs and checkpoints
    itself (``defer_syncs``, ``sync_log``, ``checkpoint``), else ``None``: a ZooKeeper store's
    writes are durable once the ensemble acknowledges them."""
    return store if isinstance(store, MetadataStore) else None
