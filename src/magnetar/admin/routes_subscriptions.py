"""Subscription endpoints under ``/admin/v2/{persistent,non-persistent}/{tenant}/{namespace}/{topic}``.

List, create at a position, delete, skip all (clear backlog), skip N, reset cursor by
time or by message id, expire, and peek (``subscription/{sub}/position/{n}``), as in
Pulsar's ``PersistentTopics`` v2. Operations that make sense for every partition of a
partitioned topic (create, delete, skip all, expire, reset by time) apply to all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import (
    OCTET_STREAM,
    Broker,
    load_topic,
    partition_count,
    require_namespace,
    require_persistent,
    require_subscription,
    topic_name,
    topics_of,
)
from magnetar.admin.errors import conflict, not_allowed, precondition_failed
from magnetar.admin.messages import entry_response, nth_unacked
from magnetar.core.names import TopicName
from magnetar.core.policies import Int64, message_expiry
from magnetar.core.positions import LATEST_ID, Position
from magnetar.core.subscriptions import cursor_moves
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic

Count = Annotated[int, Path(ge=0, le=2**31 - 1)]


class MessageIdData(BaseModel):
    """Pulsar's ``ResetCursorData`` / ``MessageIdImpl`` JSON."""

    model_config = ConfigDict(extra="ignore")
    ledgerId: Int64
    entryId: Int64
    partitionIndex: StrictInt = -1
    batchIndex: StrictInt = -1
    isExcluded: StrictBool = False


LATEST = MessageIdData(ledgerId=LATEST_ID, entryId=LATEST_ID)


def mark_delete_for(topic: Topic, message_id: MessageIdData) -> Position:
    """The mark-delete position that makes ``message_id`` the next message delivered
    (or the one after it, when ``isExcluded``)."""
    target = Position(message_id.ledgerId, message_id.entryId)
    if message_id.isExcluded and target.ledger_id >= 0 and target.ledger_id != LATEST_ID:
        mark_delete = target
    else:
        mark_delete = topic.position_before(target)
    # Never past the end: entries appended later must not count as acknowledged.
    ceiling = topic.last_readable() or topic.position_before(Position(LATEST_ID, LATEST_ID))
    return min(mark_delete, ceiling)


def make_router(domain: Literal["persistent", "non-persistent"]) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} subscriptions"])
    base = "/{tenant}/{namespace}/{topic}"

    def name_of(tenant: str, namespace: str, topic: str) -> TopicName:
        return topic_name(domain, tenant, namespace, topic)

    async def single_topic(broker: AdminBroker, name: TopicName, what: str) -> Topic:
        if await partition_count(broker, name) > 0:
            raise not_allowed(f"{what} on a partitioned topic is not allowed; use one of its partitions")
        return await load_topic(broker, name)

    async def on_every_partition(broker: AdminBroker, name: TopicName, sub_name: str, what: str,
                                 move: Callable[[Subscription], object]) -> None:
        """Move the subscription's cursor on the topic or on each of its partitions (all
        must have the subscription), storing each topic's cursors after it."""
        require_persistent(name, what)
        subs = [(t, require_subscription(t, sub_name)) for t in await topics_of(broker, name)]
        for loaded, sub in subs:
            move(sub)
            await broker.cursors.store_cursors(loaded)

    @router.get(base + "/subscriptions", summary="List the subscriptions of a topic")
    async def list_subscriptions(broker: Broker, tenant: str, namespace: str, topic: str) -> list[str]:
        names: set[str] = set()
        for loaded in await topics_of(broker, name_of(tenant, namespace, topic)):
            names.update(loaded.subscriptions)
        return sorted(names)

    @router.put(base + "/subscription/{subName}", status_code=204,
                summary="Create a subscription at a position (latest by default)")
    async def create_subscription(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                                  messageId: Annotated[MessageIdData | None, Body()] = None,
                                  replicated: bool = False) -> None:
        name = name_of(tenant, namespace, topic)
        await require_namespace(broker, name.namespace_name)
        targets = await topics_of(broker, name)
        if any(subName in t.subscriptions for t in targets):
            raise conflict("Subscription already exists for topic")
        for loaded in targets:
            loaded.create_subscription(subName, "Exclusive", durable=True,
                                       mark_delete=mark_delete_for(loaded, messageId or LATEST))
            await broker.cursors.store_cursors(loaded)

    @router.delete(base + "/subscription/{subName}", status_code=204,
                   summary="Delete a subscription (refused while consumers are connected unless forced)")
    async def delete_subscription(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                                  force: bool = False) -> None:
        targets = await topics_of(broker, name_of(tenant, namespace, topic))
        subs = [(t, require_subscription(t, subName)) for t in targets]
        if not force and any(sub.consumers for _, sub in subs):
            raise precondition_failed("Subscription has active connected consumers")
        for loaded, _ in subs:
            broker.delete_subscription(loaded, subName)
        await asyncio.wrap_future(broker.metadata_durable())

    @router.post(base + "/subscription/{subName}/skip_all", status_code=204,
                 summary="Skip every message of the backlog")
    async def skip_all(broker: Broker, tenant: str, namespace: str, topic: str, subName: str) -> None:
        await on_every_partition(broker, name_of(tenant, namespace, topic), subName, "Skipping messages",
                                 lambda sub: sub.skip_all(broker.now_ms()))

    @router.post(base + "/subscription/{subName}/skip/{numMessages}", status_code=204,
                 summary="Skip the next N messages of the backlog")
    async def skip_messages(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                            numMessages: Count) -> None:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Skipping messages")
        loaded = await single_topic(broker, name, "Skipping messages")
        cursor_moves.skip_messages(require_subscription(loaded, subName), numMessages)
        await broker.cursors.store_cursors(loaded)

    @router.post(base + "/subscription/{subName}/expireMessages/{expireTimeInSeconds}", status_code=204,
                 summary="Expire messages older than the given age")
    async def expire_messages(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                              expireTimeInSeconds: Count) -> None:
        await on_every_partition(broker, name_of(tenant, namespace, topic), subName, "Expiring messages",
                                 lambda sub: message_expiry.expire(sub, expireTimeInSeconds, broker.now_ms()))

    @router.post(base + "/subscription/{subName}/resetcursor/{timestamp}", status_code=204,
                 summary="Reset the cursor to the first message published at or after a time (ms)")
    async def reset_cursor_by_time(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                                   timestamp: Annotated[int, Path(ge=-(2**63), le=2**63 - 1)]) -> None:
        await on_every_partition(broker, name_of(tenant, namespace, topic), subName, "Resetting a cursor",
                                 lambda sub: cursor_moves.reset_cursor_by_time(sub, timestamp, broker.now_ms()))

    @router.post(base + "/subscription/{subName}/resetcursor", status_code=204,
                 summary="Reset the cursor to a message id")
    async def reset_cursor(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                           messageId: Annotated[MessageIdData, Body()]) -> None:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Resetting a cursor")
        if await partition_count(broker, name) > 0 and messageId.partitionIndex >= 0:
            name = name.partition(messageId.partitionIndex)
        loaded = await single_topic(broker, name, "Resetting a cursor to a message id")
        sub = require_subscription(loaded, subName)
        sub.reset_cursor(mark_delete_for(loaded, messageId), broker.now_ms())
        await broker.cursors.store_cursors(loaded)

    @router.get(base + "/subscription/{subName}/position/{messagePosition}", responses=OCTET_STREAM,
                response_class=Response, summary="Peek the n-th unacknowledged message of a subscription")
    async def peek_nth_message(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                               messagePosition: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> Response:
        name = name_of(tenant, namespace, topic)
        require_persistent(name, "Peek messages")
        loaded = await single_topic(broker, name, "Peek messages")
        sub = require_subscription(loaded, subName)
        pos = nth_unacked(loaded, sub.cursor.mark_delete, sub.cursor.is_acked, messagePosition)
        return entry_response(loaded, pos)

    return router
