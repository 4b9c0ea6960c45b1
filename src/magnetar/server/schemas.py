"""The schema registry's storage side: versions per topic in the metadata store, an
version id on the wire (:mod:`magnetar.core.schemas.topic_schemas`).

Partitions share their partitioned topic's schemas, and a persistent and a
non-persistent topic of one name share theirs (Pulsar's schema id is the partitioned
topic's ``tenant/namespace/topic``). Which version a schema gets, and whether it may be added,
is decided in :mod:`magnetar.core.schemas.versions`; this module reads and appends.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.metadata.records import SchemaRecord
from magnetar.core.names import TopicName
from magnetar.core.schemas.schema_data import SchemaData, schema_id
from magnetar.core.schemas.versions import StoredVersion
from magnetar.server.metadata_writer import MetadataWriter

log = logging.getLogger("magnetar.schemas")


class SchemaRegistry:
    """Schema versions per topic, kept in the metadata store so they outlive a restart.

    A version number names one schema for good: messages carry it, and a consumer asks
    for it later, so numbering must never start again from 0 after a restart. The
    history in memory is the truth once read; writes go to the metadata writer's thread
    in order, and whoever promises a version waits for :meth:`written`.
    """

    def __init__(self, store: BrokerMetadataStore, writer: MetadataWriter) -> None:
        self._store = store
        self._writer = writer
        self._cache: dict[str, list[StoredVersion]] = {}

    def history(self, name: TopicName) -> list[StoredVersion]:
        """Every stored version of the topic's schemas, delete markers included, oldest first."""
        key = schema_id(name)
        cached = self._cache.get(key)
        if cached is None:
            cached = [StoredVersion(number, SchemaData(r.schema_type, r.data, dict(r.properties)), r.timestamp_ms,
                                    r.deleted)
                      for number, r in enumerate(self._store.get_schemas(key))]
            self._cache[key] = cached
        return cached

    def append(self, name: TopicName, schema: SchemaData, now_ms: int, *, deleted: bool = False) -> StoredVersion:
        """Add ``schema`` (or a delete marker) as the next version; stored off the event loop."""
        history = self.history(name)
        stored = StoredVersion(history[-1].version + 1 if history else 0, schema, now_ms, deleted)
        history.append(stored)
        key, record = schema_id(name), SchemaRecord(schema.schema_type, schema.data, dict(schema.properties),
                                                    now_ms, deleted)
        self._writer.submit(lambda store: store.put_schema(key, stored.version, record)).add_done_callback(
            _log_failure)
        return stored

    def delete_all(self, name: TopicName) -> None:
        """Remove every version for good (Pulsar's forced delete): numbering starts again."""
        key = schema_id(name)
        self._cache[key] = []
        self._writer.submit(lambda store: store.delete_schemas(key)).add_done_callback(_log_failure)

    def written(self) -> concurrent.futures.Future[None]:
        """Done once every schema change made so far is in the store."""
        return self._writer.barrier()


def _log_failure(write: concurrent.futures.Future[Any]) -> None:
    if write.exception() is not None:
        log.error("storing a schema change failed", exc_info=write.exception())
