"""``/admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction``: trigger a topic's
compaction and read its status (Pulsar's ``PersistentTopics.compact`` / ``compactionStatus``).

``PUT`` starts a compaction and answers at once (204); while one runs it answers 409.
``GET`` answers Pulsar's ``LongRunningProcessStatus``: ``status`` (``NOT_RUN``,
``RUNNING``, ``SUCCESS``, ``ERROR``) and ``lastError``. A partitioned topic is compacted
partition by partition, as Pulsar does.
"""

from __future__ import annotations

from fastapi import APIRouter

from magnetar.admin.common import Broker, load_topic, partition_count, topic_name
from magnetar.admin.errors import RestError, conflict
from magnetar.core.compaction.compacted_topic import CompactionAlreadyRunning

router = APIRouter(prefix="/admin/v2/persistent", tags=["topics"])


@router.put("/{tenant}/{namespace}/{topic}/compaction", status_code=204,
            summary="Trigger a compaction of the topic (409 while one runs)")
async def trigger_compaction(broker: Broker, tenant: str, namespace: str, topic: str) -> None:
    name = topic_name("persistent", tenant, namespace, topic)
    count = await partition_count(broker, name)
    for target in [name.partition(i) for i in range(count)] if count else [name]:
        try:
            broker.compaction.trigger(await load_topic(broker, target))
        except CompactionAlreadyRunning as exc:
            raise conflict(str(exc)) from None


@router.get("/{tenant}/{namespace}/{topic}/compaction", summary="Get the status of the topic's compaction")
async def compaction_status(broker: Broker, tenant: str, namespace: str, topic: str) -> dict[str, str]:
    name = topic_name("persistent", tenant, namespace, topic)
    if await partition_count(broker, name):
        raise RestError(405, "Compaction status of a partitioned topic: ask each partition")
    compacted = (await load_topic(broker, name)).compacted
    return {"status": compacted.state, "lastError": compacted.last_error}
