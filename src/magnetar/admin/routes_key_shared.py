"""Finding the message that blocks a key: pending messages by consumer, and sticky key hashes.

Beyond Pulsar's admin API (PIP-379 names it a future improvement). Under
``/admin/v2/{persistent,non-persistent}/{tenant}/{namespace}/{topic}``:

- ``GET /stickyKeyHash?key=K`` (or ``keyBase64=``): the hash Key_Shared computes for a key;
- ``GET /subscription/{sub}/stickyKeyHash?key=K``: that hash plus, on a Key_Shared
  subscription, the consumer it is assigned to, the consumer it is draining at, how many
  messages hold it there, how often delivery was blocked, and what waits for replay;
- ``GET /subscription/{sub}/consumer/{consumerName}/pendingMessages``: the messages
  delivered to that consumer and not acknowledged (message id, batch size, sticky hash,
  key, redelivery count, whether the hash is draining there), filtered by
  ``stickyKeyHash`` and/or ``key``/``keyBase64``, at most ``limit``.

On a partitioned topic every partition is searched and ids carry their partition.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from magnetar.admin.common import Broker, require_subscription, topic_name, topics_of
from magnetar.admin.errors import bad_request, not_found
from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.key_shared.pending_messages import PendingFilter, PendingMessage, pending_messages
from magnetar.core.key_shared.sticky_key import MAX_STICKY_KEY_HASH, sticky_key_hash
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics.topic import Topic

KeyParam = Annotated[str | None, Query(max_length=1024, description="The key as UTF-8 text")]
KeyB64Param = Annotated[str | None, Query(max_length=1368, description="The key bytes, base64")]
HashParam = Annotated[int | None, Query(ge=0, le=MAX_STICKY_KEY_HASH, description="A sticky key hash")]
LimitParam = Annotated[int, Query(ge=1, le=100_000, description="Most messages returned")]


def key_bytes(key: str | None, key_base64: str | None, required: bool) -> bytes | None:
    if key is not None and key_base64 is not None:
        raise bad_request("Give either key or keyBase64, not both")
    if key_base64 is not None:
        try:
            return base64.b64decode(key_base64, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("keyBase64 is not valid base64") from None
    if key is not None:
        return key.encode("utf-8")
    if required:
        raise bad_request("A key is required: key=<text> or keyBase64=<base64>")
    return None


def _key_json(key: bytes) -> dict[str, Any]:
    try:
        text: str | None = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"key": text, "keyBase64": base64.b64encode(key).decode("ascii")}


def _message_json(topic: Topic, consumer: Consumer, message: PendingMessage) -> dict[str, Any]:
    pos, partition = message.position, topic.partition_index
    return {
        "consumerName": consumer.consumer_name,
        "consumerId": consumer.consumer_id,
        "messageId": f"{pos.ledger_id}:{pos.entry_id}:{partition}",
        "ledgerId": pos.ledger_id,
        "entryId": pos.entry_id,
        "partitionIndex": partition,
        "batchSize": message.batch_size,
        "stickyKeyHash": message.sticky_key_hash,
        **_key_json(message.key),
        "redeliveryCount": message.redelivery_count,
        "draining": message.draining,
    }


def _draining_check(sub: Subscription, consumer: Consumer) -> Any:
    dispatcher = sub.dispatcher
    if isinstance(dispatcher, KeySharedDispatcher):
        return lambda sticky_hash: dispatcher.is_draining_at(consumer, sticky_hash)
    return lambda sticky_hash: False


def make_router(domain: Literal["persistent", "non-persistent"]) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} Key_Shared troubleshooting"])
    base = "/{tenant}/{namespace}/{topic}"

    @router.get(base + "/stickyKeyHash", summary="The sticky key hash of a key")
    async def sticky_hash_of_key(broker: Broker, tenant: str, namespace: str, topic: str,
                                 key: KeyParam = None, keyBase64: KeyB64Param = None) -> dict[str, Any]:
        raw = key_bytes(key, keyBase64, required=True)
        assert raw is not None
        await topics_of(broker, topic_name(domain, tenant, namespace, topic))
        return {**_key_json(raw), "stickyKeyHash": sticky_key_hash(raw)}

    @router.get(base + "/subscription/{subName}/stickyKeyHash",
                summary="Where a key's sticky hash goes in a subscription, and what holds it")
    async def sticky_hash_status(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                                 key: KeyParam = None, keyBase64: KeyB64Param = None) -> dict[str, Any]:
        raw = key_bytes(key, keyBase64, required=True)
        assert raw is not None
        sticky_hash = sticky_key_hash(raw)
        partitions = []
        for loaded in await topics_of(broker, topic_name(domain, tenant, namespace, topic)):
            sub = require_subscription(loaded, subName)
            status: dict[str, Any] = {"partitionIndex": loaded.partition_index, "subscriptionType": sub.sub_type}
            if isinstance(sub.dispatcher, KeySharedDispatcher):
                status.update(sub.dispatcher.hash_status(sticky_hash))
            partitions.append(status)
        return {**_key_json(raw), "stickyKeyHash": sticky_hash, "partitions": partitions}

    @router.get(base + "/subscription/{subName}/consumer/{consumerName}/pendingMessages",
                summary="Messages delivered to a consumer and not yet acknowledged, with their keys")
    async def consumer_pending_messages(broker: Broker, tenant: str, namespace: str, topic: str, subName: str,
                                        consumerName: str, stickyKeyHash: HashParam = None,
                                        key: KeyParam = None, keyBase64: KeyB64Param = None,
                                        limit: LimitParam = 1000) -> dict[str, Any]:
        wanted = PendingFilter(stickyKeyHash, key_bytes(key, keyBase64, required=False))
        found, truncated = False, False
        messages: list[dict[str, Any]] = []
        for loaded in await topics_of(broker, topic_name(domain, tenant, namespace, topic)):
            sub = require_subscription(loaded, subName)
            for consumer in [c for c in sub.consumers if c.consumer_name == consumerName]:
                found = True
                for message in pending_messages(consumer, loaded.read_entry, sub.redelivery_counts,
                                                _draining_check(sub, consumer), wanted):
                    if len(messages) == limit:
                        truncated = True
                        break
                    messages.append(_message_json(loaded, consumer, message))
        if not found:
            raise not_found(f"Consumer {consumerName} not found on subscription {subName}")
        return {"pendingMessages": messages, "truncated": truncated}

    return router
