"""``/admin/v2/persistent/...`` and ``/admin/v2/non-persistent/...`` topic endpoints.

Pulsar's ``PersistentTopics`` / ``NonPersistentTopics`` v2: list, create, partitions,
delete, unload, stats, partitioned-stats, internal stats, last message id, examine and
get-by-id. One router is made per domain so the OpenAPI document names each path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query
from fastapi.responses import Response
from pydantic import StrictInt

from magnetar.admin import stats
from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import (
    OCTET_STREAM,
    Broker,
    load_topic,
    namespace_in,
    namespace_name,
    partition_count,
    partitions_in,
    require_namespace,
    require_persistent,
    topic_name,
    topics_listed,
    topics_of,
)
from magnetar.admin.errors import RestError, conflict, not_allowed, not_found, precondition_failed
from magnetar.admin.messages import entry_response, nth_from
from magnetar.admin.store_access import StoreRules, in_rules, in_store
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.names import TopicName
from magnetar.core.policies import INT64_MAX, message_expiry
from magnetar.core.positions import Position
from magnetar.core.subscriptions import cursor_moves
from magnetar.core.topics import topic_activity

Int64Path = Annotated[int, Path(ge=-(2**63), le=INT64_MAX)]
PositiveInt = Annotated[int, Query(ge=1, le=2**31 - 1)]
Partitions = Annotated[StrictInt, Body(ge=-(2**31), le=2**31 - 1)]


def stats_options(getPreciseBacklog: bool, subscriptionBacklogSize: bool, getEarliestTimeInBacklog: bool,
                  excludePublishers: bool, excludeConsumers: bool) -> stats.StatsOptions:
    return stats.StatsOptions(getPreciseBacklog, subscriptionBacklogSize, getEarliestTimeInBacklog,
                              excludePublishers, excludeConsumers)


async def require_exists(broker: AdminBroker, name: TopicName) -> None:
    def known(rules: StoreRules) -> int | None:
        namespace_in(rules.store, name.namespace_name)
        return rules.records.partitions_of(name)
    if await in_rules(broker, known) is None and str(name) not in broker.topics:
        raise not_found("Topic not found")


async def require_partitioned(broker: AdminBroker, name: TopicName) -> int:
    def count(store: BrokerMetadataStore) -> int:
        namespace_in(store, name.namespace_name)
        found = partitions_in(store, name)
        if found == 0:
            raise not_found(f"Partitioned topic does not exist: {name}")
        return found
    return await in_store(broker, count)


async def partitioned_metadata(broker: AdminBroker, name: TopicName, check_auto_creation: bool = False) \
        -> dict[str, Any]:
    """What ``GET .../partitions`` answers."""
    def partitions(rules: StoreRules) -> int:
        namespace_in(rules.store, name.namespace_name)
        known = rules.records.partitions_of(name)
        if known is None:
            known = rules.records.partitioned_metadata(name) if check_auto_creation else 0
        return known
    return {"partitions": await in_rules(broker, partitions), "deleted": False}


async def topic_stats(broker: AdminBroker, name: TopicName, options: stats.StatsOptions) -> dict[str, Any]:
    """What ``GET .../stats`` answers."""
    loaded = await load_topic(broker, name)
    return stats.topic_stats(broker, loaded, broker.now_ms(), options)


async def partitioned_stats(broker: AdminBroker, name: TopicName, options: stats.StatsOptions,
                            per_partition: bool) -> dict[str, Any]:
    """What ``GET .../partitioned-stats`` answers."""
    count = await require_partitioned(broker, name)
    now = broker.now_ms()
    parts = {str(t.name): stats.topic_stats(broker, t, now, options) for t in await topics_of(broker, name)}
    return stats.partitioned_topic_stats(count, parts, per_partition)


def check_partition_limit(broker: AdminBroker, partitions: int) -> None:
    if partitions <= 0:
        raise RestError(406, "Number of partitions should be more than 0")
    limit = broker.config.maxNumPartitionsPerPartitionedTopic
    if 0 < limit < partitions:
        raise RestError(406, f"Number of partitions {partitions} exceeds maxNumPartitionsPerPartitionedTopic "
                             f"({limit})")


def message_id_json(pos: Position, partition: int, batch_index: int = -1) -> dict[str, int]:
    message_id = {"ledgerId": pos.ledger_id, "entryId": pos.entry_id, "partitionIndex": partition}
    if batch_index >= 0:
        message_id["batchIndex"] = batch_index
    return message_id


def make_router(domain: Literal["persistent", "non-persistent"]) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} topics"])
    mode = 0 if domain == "persistent" else 1

    def name_of(tenant: str, namespace: str, topic: str) -> TopicName:
        return topic_name(domain, tenant, namespace, topic)

    @router.get("/{tenant}/{namespace}", summary="List the topics of a namespace (partitions included)")
    async def list_topics(broker: Broker, tenant: str, namespace: str) -> list[str]:
        name = namespace_name(tenant, namespace)
        return await in_rules(broker, lambda rules: topics_listed(rules, name, mode))

    @router.get("/{tenant}/{namespace}/partitioned", summary="List the partitioned topics of a namespace")
    async def list_partitioned_topics(broker: Broker, tenant: str, namespace: str) -> list[str]:
        name = namespace_name(tenant, namespace)

        def listed(store: BrokerMetadataStore) -> list[str]:
            namespace_in(store, name)
            return sorted(t for t in store.list_partitioned_topics(name) if t.startswith(f"{domain}://"))
        return await in_store(broker, listed)

    @router.put("/{tenant}/{namespace}/{topic}", status_code=204, summary="Create a non-partitioned topic")
    async def create_topic(broker: Broker, tenant: str, namespace: str, topic: str,
                           properties: Annotated[dict[str, str] | None, Body()] = None) -> None:
        name = name_of(tenant, namespace, topic)

        def create(rules: StoreRules) -> None:
            namespace_in(rules.store, name.namespace_name)
            if rules.records.partitions_of(name) is not None:
                raise conflict("This topic already exists")
            rules.records.check_topic_count(name)
            rules.store.create_topic(str(name), properties or {})
        await in_rules(broker, create)

    @router.delete("/{tenant}/{namespace}/{topic}", status_code=204,
                   summary="Delete a topic (refused while clients are connected unless forced)")
    async def delete_topic(broker: Broker, tenant: str, namespace: str, topic: str, force: bool = False,
                           deleteSchema: bool = False) -> None:
        name = name_of(tenant, namespace, topic)
        await require_exists(broker, name)
        if await partition_count(broker, name) > 0:
            raise conflict(f"Topic {name} is a partitioned topic: delete it with DELETE .../partitions")
        live = broker.topics.get(str(name))
        if live is not None and topic_activity.has_clients(live) and not force:
            raise precondition_failed("Topic has active producers/subscriptions")
        await broker.release.delete_topic(name)

    @router.put("/{tenant}/{namespace}/{topic}/partitions", status_code=204,
                summary="Create a partitioned topic")
    async def create_partitioned_topic(broker: Broker, tenant: str, namespace: str, topic: str,
                                       partitions: Partitions, createLocalTopicOnly: bool = False) -> None:
        name = name_of(tenant, namespace, topic)
        await require_namespace(broker, name.namespace_name)
        check_partition_limit(broker, partitions)
        if name.partition_index >= 0:
            raise precondition_failed(f"Partitioned topic name must not end with -partition-<n>: {name}")

        def create(rules: StoreRules) -> None:
            if rules.records.partitions_of(name) is not None:
                raise conflict("This topic already exists")
            rules.records.create_partitioned_topic(name, partitions)
        await in_rules(broker, create)

    @router.post("/{tenant}/{namespace}/{topic}/partitions", status_code=204,
                 summary="Increase the partitions of a partitioned topic")
    async def update_partitioned_topic(broker: Broker, tenant: str, namespace: str, topic: str,
                                       partitions: Partitions, updateLocalTopicOnly: bool = False,
                                       force: bool = False) -> None:
        name = name_of(tenant, namespace, topic)
        current = await require_partitioned(broker, name)
        check_partition_limit(broker, partitions)
        if partitions <= current:
            raise RestError(422, f"Desired partitions {partitions} must be more than the current {current}")
        await in_store(broker, lambda store: store.update_partitioned_topic(str(name), partitions))

    @router.get("/{tenant}/{namespace}/{topic}/partitions", summary="Get partitioned topic metadata")
    async def get_partitioned_metadata(broker: Broker, tenant: str, namespace: str, topic: str,
                                       checkAllowAutoCreation: bool = False) -> dict[str, Any]:
        return await partitioned_metadata(broker, name_of(tenant, namespace, topic), checkAllowAutoCreation)

    @router.delete("/{tenant}/{namespace}/{topic}/partitions", status_code=204,
                   summary="Delete a partitioned topic and its partitions")
    async def delete_partitioned(broker: Broker, tenant: str, namespace: str, topic: str,
                                 force: bool = False, deleteSchema: bool = False) -> None:
        name = name_of(tenant, namespace, topic)
        count = await require_partitioned(broker, name)
        live = [broker.topics.get(str(name.partition(i))) for i in range(count)]
        if not force and any(t is not None and topic_activity.has_clients(t) for t in live):
            raise precondition_failed("Topic has active producers/subscriptions")
        await broker.release.delete_partitioned_topic(name, count)

    @router.put("/{tenant}/{namespace}/{topic}/unload", status_code=204,
                summary="Unload a topic: clients reconnect and it is loaded again")
    async def unload_topic(broker: Broker, tenant: str, namespace: str, topic: str) -> None:
        name = name_of(tenant, namespace, topic)
        await require_exists(broker, name)
        count = await partition_count(broker, name)
        for target in [name.partition(i) for i in range(count)] if count else [name]:
            await broker.release.unload_topic(target)

    @router.post("/{tenant}/{namespace}/{topic}/terminate",
                 summary="Terminate a topic: no more messages; the id of its last message")
    async def terminate(broker: Broker, tenant: str, namespace: str, topic: str) -> dict[str, int]:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Termination")
        if await partition_count(broker, name) > 0:
            raise not_allowed("Termination of a partitioned topic is not allowed")
        await load_topic(broker, name)
        last = await broker.terminate(name)
        return message_id_json(last, name.partition_index)

    @router.post("/{tenant}/{namespace}/{topic}/terminate/partitions",
                 summary="Terminate every partition of a partitioned topic; the last message id of each")
    async def terminate_partitions(broker: Broker, tenant: str, namespace: str,
                                   topic: str) -> dict[int, dict[str, int]]:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Termination")
        count = await require_partitioned(broker, name)
        ids = {}
        for index in range(count):
            await load_topic(broker, name.partition(index))
            ids[index] = message_id_json(await broker.terminate(name.partition(index)), index)
        return ids

    @router.get("/{tenant}/{namespace}/{topic}/stats", summary="Get the stats of a topic")
    async def get_stats(broker: Broker, tenant: str, namespace: str, topic: str,
                        getPreciseBacklog: bool = False, subscriptionBacklogSize: bool = True,
                        getEarliestTimeInBacklog: bool = False, excludePublishers: bool = False,
                        excludeConsumers: bool = False) -> dict[str, Any]:
        options = stats_options(getPreciseBacklog, subscriptionBacklogSize, getEarliestTimeInBacklog,
                                excludePublishers, excludeConsumers)
        return await topic_stats(broker, name_of(tenant, namespace, topic), options)

    @router.get("/{tenant}/{namespace}/{topic}/partitioned-stats",
                summary="Get the stats of a partitioned topic: aggregated and per partition")
    async def get_partitioned_stats(broker: Broker, tenant: str, namespace: str, topic: str,
                                    perPartition: bool = True, getPreciseBacklog: bool = False,
                                    subscriptionBacklogSize: bool = True, getEarliestTimeInBacklog: bool = False,
                                    excludePublishers: bool = False,
                                    excludeConsumers: bool = False) -> dict[str, Any]:
        options = stats_options(getPreciseBacklog, subscriptionBacklogSize, getEarliestTimeInBacklog,
                                excludePublishers, excludeConsumers)
        return await partitioned_stats(broker, name_of(tenant, namespace, topic), options, perPartition)

    @router.get("/{tenant}/{namespace}/{topic}/internalStats", summary="Get the internal stats of a topic")
    async def get_internal_stats(broker: Broker, tenant: str, namespace: str, topic: str,
                                 metadata: bool = False) -> dict[str, Any]:
        return stats.internal_stats(await load_topic(broker, name_of(tenant, namespace, topic)))

    @router.get("/{tenant}/{namespace}/{topic}/partitioned-internalStats",
                summary="Get the internal stats of every partition of a partitioned topic")
    async def get_partitioned_internal_stats(broker: Broker, tenant: str, namespace: str,
                                             topic: str) -> dict[str, Any]:
        name = name_of(tenant, namespace, topic)
        count = await require_partitioned(broker, name)
        return {"metadata": {"partitions": count},
                "partitions": {str(t.name): stats.internal_stats(t) for t in await topics_of(broker, name)}}

    @router.get("/{tenant}/{namespace}/{topic}/lastMessageId", summary="Get the id of the last message")
    async def get_last_message_id(broker: Broker, tenant: str, namespace: str, topic: str) -> dict[str, int]:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Get last message id")
        loaded = await load_topic(broker, name)
        last, batch_index = cursor_moves.last_message_id(loaded)
        if last.ledger_id < 0:
            ledgers = loaded.ledger.ledgers()
            last = Position(ledgers[-1].ledger_id if ledgers else -1, -1)
        return message_id_json(last, loaded.partition_index, batch_index)

    @router.get("/{tenant}/{namespace}/{topic}/messageid/{timestamp}",
                summary="Get the id of the first message published at or after a time (ms)")
    async def get_message_id_by_timestamp(broker: Broker, tenant: str, namespace: str, topic: str,
                                          timestamp: Int64Path) -> dict[str, int]:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Get message id by timestamp")
        loaded = await load_topic(broker, name)
        before = cursor_moves.position_before_time(loaded, timestamp)
        last = loaded.last_readable()
        found = loaded.next_position(before)
        if last is None or found > last:
            raise not_found("Message ID not found")
        return message_id_json(found, loaded.partition_index)

    @router.get("/{tenant}/{namespace}/{topic}/examinemessage", responses=OCTET_STREAM,
                response_class=Response,
                summary="Examine the n-th message from the earliest or the latest")
    async def examine_message(broker: Broker, tenant: str, namespace: str, topic: str,
                              initialPosition: Literal["latest", "earliest"] = "latest",
                              messagePosition: PositiveInt = 1) -> Response:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Examine messages")
        if await partition_count(broker, name) > 0:
            raise not_allowed("Examine messages on a partitioned topic is not allowed; use a partition")
        loaded = await load_topic(broker, name)
        return entry_response(loaded, nth_from(loaded, initialPosition, messagePosition))

    @router.get("/{tenant}/{namespace}/{topic}/ledger/{ledgerId}/entry/{entryId}", responses=OCTET_STREAM,
                response_class=Response, summary="Get a message by its ledger and entry id")
    async def get_message_by_id(broker: Broker, tenant: str, namespace: str, topic: str,
                                ledgerId: Int64Path, entryId: Int64Path) -> Response:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Get message by id")
        loaded = await load_topic(broker, name)
        return entry_response(loaded, Position(ledgerId, entryId))

    @router.post("/{tenant}/{namespace}/{topic}/all_subscription/expireMessages/{expireTimeInSeconds}",
                 status_code=204, summary="Expire messages older than the given age on every subscription")
    async def expire_all_subscriptions(broker: Broker, tenant: str, namespace: str, topic: str,
                                       expireTimeInSeconds: Annotated[int, Path(ge=0, le=2**31 - 1)]) -> None:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Expire messages")
        for loaded in await topics_of(broker, name):
            for sub in list(loaded.subscriptions.values()):
                message_expiry.expire(sub, expireTimeInSeconds, broker.now_ms())
            await broker.cursors.store_cursors(loaded)

    return router
