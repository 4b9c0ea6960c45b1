"""What the broker's helper modules (deduplication, property dedup, the shared delayed
index, the snapshot sweep, compaction) use of the broker service.

A Protocol in a module of its own, so that those modules depend on this leaf and the
service depends on them, with no import path leading back to the service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.policies.policy_cache import PolicyCache
from magnetar.core.topics.loaded_topics import LoadedTopics
from magnetar.server.appends import Appends
from magnetar.server.cursor_persistence import CursorPersistence
from magnetar.server.ledger_ids import LedgerIds
from magnetar.server.metadata_writer import MetadataWriter
from magnetar.storage.group_commit import GroupCommitter
from magnetar.storage.ledger_bucket_snapshot_storage import LedgerBucketSnapshotStorage


class BrokerShell(Protocol):
    config: BrokerConfig
    data_dir: Path
    metadata: BrokerMetadataStore
    writer: MetadataWriter
    ledger_ids: LedgerIds
    topics: LoadedTopics
    core: BrokerCore
    committer: GroupCommitter

    @property
    def bucket_snapshot_storage(self) -> LedgerBucketSnapshotStorage: ...

    policies: PolicyCache
    cursors: CursorPersistence
    appends: Appends
