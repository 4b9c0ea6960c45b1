"""Topic stats as Pulsar's admin API returns them, computed from live core objects.

Shapes and field names follow Pulsar's ``TopicStatsImpl``, ``PublisherStatsImpl``,
``SubscriptionStatsImpl``, ``ConsumerStatsImpl``, ``PartitionedTopicStatsImpl`` and
``PersistentTopicInternalStats`` (``ManagedLedgerInternalStats``), so scripts and
dashboards written for Pulsar read them unchanged. Rates are per second over the
rolling window of :mod:`magnetar.core.stats`.

Extension points: a subscription type may add fields to its subscription and consumer
stats (``register_subscription_stats`` / ``register_consumer_stats``); Key_Shared's
draining-hashes stats come in this way from its dispatcher's ``subscription_stats()``
and ``consumer_stats(consumer)``. Delayed-delivery counts come from
``delayed_delivery_stats``, which reads the subscription's tracker; replace
``DELAYED_DELIVERY_STATS`` to read another index.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from magnetar.core.entry import EntryInfo
from magnetar.core.policies import lifecycle_checks
from magnetar.core.positions import Position
from magnetar.core.topics.backlog import backlog_size_bytes, oldest_backlog, topic_backlog_bytes
from magnetar.core.topics.topic import topic_of

if TYPE_CHECKING:
    from magnetar.admin.admin_broker import AdminBroker
    from magnetar.core.subscriptions.consumer import Consumer
    from magnetar.core.subscriptions.subscription import Subscription
    from magnetar.core.topics.producer import Producer
    from magnetar.core.topics.topic import Topic

Stats = dict[str, Any]
SubscriptionStatsHook = Callable[["Subscription"], Stats]
ConsumerStatsHook = Callable[["Subscription", "Consumer"], Stats]

_SUBSCRIPTION_HOOKS: dict[str, SubscriptionStatsHook] = {}
_CONSUMER_HOOKS: dict[str, ConsumerStatsHook] = {}


def register_subscription_stats(sub_type: str, hook: SubscriptionStatsHook) -> None:
    """Fields ``hook(sub)`` returns are merged into the stats of subscriptions of ``sub_type``."""
    _SUBSCRIPTION_HOOKS[sub_type] = hook


def register_consumer_stats(sub_type: str, hook: ConsumerStatsHook) -> None:
    """Fields ``hook(sub, consumer)`` returns are merged into each consumer's stats."""
    _CONSUMER_HOOKS[sub_type] = hook


def _dispatcher_subscription_stats(sub: Subscription) -> Stats:
    return dict(sub.dispatcher.subscription_stats())


def _dispatcher_consumer_stats(sub: Subscription, consumer: Consumer) -> Stats:
    return dict(sub.dispatcher.consumer_stats(consumer))


register_subscription_stats("Key_Shared", _dispatcher_subscription_stats)
register_consumer_stats("Key_Shared", _dispatcher_consumer_stats)


def extra_subscription_stats(sub: Subscription) -> Stats:
    """The fields the subscription's type adds (its registered hook), or none."""
    hook = _SUBSCRIPTION_HOOKS.get(sub.sub_type)
    return hook(sub) if hook is not None else {}


def extra_consumer_stats(sub: Subscription, consumer: Consumer) -> Stats:
    """The fields the subscription's type adds to a consumer's stats, or none."""
    hook = _CONSUMER_HOOKS.get(sub.sub_type)
    return hook(sub, consumer) if hook is not None else {}


@dataclass(frozen=True)
class DelayedStats:
    messages: int = 0
    index_size_bytes: int = 0


def delayed_delivery_stats(sub: Subscription) -> DelayedStats:
    """``msgDelayed`` and ``delayedMessageIndexSizeInBytes`` from the subscription's tracker."""
    tracker = sub.delayed_tracker
    if tracker is None:
        return DelayedStats()
    return DelayedStats(tracker.number_of_delayed_messages, tracker.buffer_memory_bytes)


DELAYED_DELIVERY_STATS: Callable[[Subscription], DelayedStats] = delayed_delivery_stats


@dataclass(frozen=True)
class StatsOptions:
    """Query parameters of Pulsar's ``stats`` endpoint."""

    get_precise_backlog: bool = False
    subscription_backlog_size: bool = True
    get_earliest_time_in_backlog: bool = False
    exclude_publishers: bool = False
    exclude_consumers: bool = False


def iso_time(ms: int) -> str:
    """Pulsar's ``lastAckedTime`` style: ISO-8601 with milliseconds and offset."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


# -- publishers and consumers ------------------------------------------------------------------
def publisher_stats(producer: Producer, now_ms: int) -> Stats:
    rate, throughput = producer.msg_in.rate(now_ms)
    return {
        "accessMode": producer.access_mode.name,
        "msgRateIn": rate,
        "msgThroughputIn": throughput,
        "averageMsgSize": throughput / rate if rate else 0.0,
        "chunkedMessageRate": 0.0,
        "producerId": producer.producer_id,
        "supportsPartialProducer": False,
        "producerName": producer.producer_name,
        "address": producer.address,
        "connectedSince": producer.connected_since,
        "clientVersion": producer.client_version,
        "metadata": dict(producer.metadata),
    }


def consumer_stats(sub: Subscription, consumer: Consumer, now_ms: int) -> Stats:
    rate, throughput = consumer.msg_out.rate(now_ms)
    out = consumer.msg_out
    stats: Stats = {
        "msgRateOut": rate,
        "msgThroughputOut": throughput,
        "bytesOutCounter": out.total_bytes,
        "msgOutCounter": out.total_msgs,
        "msgRateRedeliver": consumer.redeliver.rate(now_ms)[0],
        "messageAckRate": consumer.acks.rate(now_ms)[0],
        "chunkedMessageRate": 0.0,
        "consumerName": consumer.consumer_name,
        "availablePermits": max(consumer.permits, 0),
        "unackedMessages": consumer.unacked_messages,
        "avgMessagesPerEntry": round(out.total_msgs / out.total_events) if out.total_events else 0,
        "blockedConsumerOnUnackedMsgs": consumer.blocked_on_unacked,
        "address": consumer.address,
        "connectedSince": consumer.connected_since,
        "clientVersion": consumer.client_version,
        "lastAckedTimestamp": consumer.acks.last_ms,
        "lastConsumedTimestamp": out.last_ms,
        "lastConsumedFlowTimestamp": 0,
        "metadata": dict(consumer.metadata),
    }
    stats.update(extra_consumer_stats(sub, consumer))
    stats["lastAckedTime"] = iso_time(consumer.acks.last_ms)
    stats["lastConsumedTime"] = iso_time(out.last_ms)
    return stats


# -- subscriptions ------------------------------------------------------------------------------
def earliest_publish_time_in_backlog(sub: Subscription) -> int:
    topic = sub.topic
    last = topic.last_readable()
    pos = sub.cursor.mark_delete
    while last is not None and pos < last:
        pos = topic.next_position(pos)
        if pos > last:
            break
        if not sub.cursor.is_acked(pos):
            try:
                return EntryInfo.read(topic.read_entry(pos)).publish_time_ms
            except (KeyError, ValueError):
                return 0
    return 0


def subscription_stats(broker: AdminBroker, sub: Subscription, now_ms: int,
                       options: StatsOptions = StatsOptions()) -> Stats:
    consumers = [consumer_stats(sub, c, now_ms) for c in sub.consumers]
    backlog = sub.backlog()
    delayed = DELAYED_DELIVERY_STATS(sub)
    ranges = sub.cursor.deleted_ranges()
    active = sub.dispatcher.active_consumer()
    stats: Stats = {
        "msgRateOut": float(sum(c["msgRateOut"] for c in consumers)),
        "msgThroughputOut": float(sum(c["msgThroughputOut"] for c in consumers)),
        "bytesOutCounter": sum(c["bytesOutCounter"] for c in consumers),
        "msgOutCounter": sum(c["msgOutCounter"] for c in consumers),
        "msgRateRedeliver": float(sum(c["msgRateRedeliver"] for c in consumers)),
        "messageAckRate": float(sum(c["messageAckRate"] for c in consumers)),
        "chunkedMessageRate": 0,
        "msgBacklog": backlog,
        "backlogSize": backlog_size_bytes(topic_of(sub), sub.cursor.mark_delete)
        if options.subscription_backlog_size else -1,
        "earliestMsgPublishTimeInBacklog": earliest_publish_time_in_backlog(sub)
        if options.get_earliest_time_in_backlog else 0,
        "msgBacklogNoDelayed": max(0, backlog - delayed.messages),
        "blockedSubscriptionOnUnackedMsgs": sub.dispatcher.blocked_on_unacked,
        "msgDelayed": delayed.messages,
        "unackedMessages": sub.unacked_messages(),
        "type": sub.sub_type,
        "activeConsumerName": active.consumer_name if active is not None else None,
        "msgRateExpired": sub.expired.rate(now_ms)[0],
        "totalMsgExpired": sub.expired.total_msgs,
        "lastExpireTimestamp": sub.expired.last_ms,
        "lastConsumedFlowTimestamp": 0,
        "lastConsumedTimestamp": max((c["lastConsumedTimestamp"] for c in consumers), default=0),
        "lastAckedTimestamp": max((c["lastAckedTimestamp"] for c in consumers), default=0),
        "lastMarkDeleteAdvancedTimestamp": 0,
        "consumers": [] if options.exclude_consumers else consumers,
        "isDurable": sub.durable,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": len(ranges),
        "nonContiguousDeletedMessagesRangesSerializedSize": 16 * len(ranges),
        "delayedMessageIndexSizeInBytes": delayed.index_size_bytes,
        "subscriptionProperties": dict(sub.properties),
        "filterProcessedMsgCount": 0,
        "filterAcceptedMsgCount": 0,
        "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
    }
    if stats["activeConsumerName"] is None:
        del stats["activeConsumerName"]
    stats.update(extra_subscription_stats(sub))
    return stats


# -- topics -------------------------------------------------------------------------------------------
def deduplication_status(topic: Topic) -> str:
    dedup = topic.dedup
    return "Disabled" if dedup is None else str(dedup.status)


def lifecycle_stats(broker: AdminBroker, topic: Topic, now_ms: int) -> Stats:
    """Backlog quota limits (-1: none), the oldest unacknowledged message (PIP-323; age 0
    without backlog) and the topic's creation and last publish times (ms)."""
    quotas = lifecycle_checks.backlog_quotas_of(broker.policies, topic.name)
    oldest = oldest_backlog(topic)
    return {
        "backlogQuotaLimitSize": quotas.size.limit,
        "backlogQuotaLimitTime": quotas.time.limit,
        "oldestBacklogMessageAgeSeconds": oldest.age_s(now_ms) if oldest is not None else 0,
        "oldestBacklogMessageSubscriptionName": oldest.subscription if oldest is not None else None,
        "topicCreationTimeStamp": topic.created_ms,
        "lastPublishTimeStamp": topic.last_publish_ms,
    }


def topic_stats(broker: AdminBroker, topic: Topic, now_ms: int,
                options: StatsOptions = StatsOptions()) -> Stats:
    rate_in, throughput_in = topic.msg_in.rate(now_ms)
    subscriptions = {name: subscription_stats(broker, sub, now_ms, options)
                     for name, sub in sorted(topic.subscriptions.items())}
    ranges = sum(s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values())
    stats: Stats = {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": float(sum(s["msgRateOut"] for s in subscriptions.values())),
        "msgThroughputOut": float(sum(s["msgThroughputOut"] for s in subscriptions.values())),
        "bytesInCounter": topic.msg_in.total_bytes,
        "msgInCounter": topic.msg_in.total_msgs,
        "systemTopicBytesInCounter": 0,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subscriptions.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subscriptions.values()),
        "bytesOutInternalCounter": 0,
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
        "msgChunkPublished": False,
        "storageSize": topic.ledger.total_size_bytes(),
        "backlogSize": topic_backlog_bytes(topic),
        "publishRateLimitedTimes": topic.publish_limiter.limited_times if topic.publish_limiter else 0,
        "earliestMsgPublishTimeInBacklogs": min(
            (s["earliestMsgPublishTimeInBacklog"] for s in subscriptions.values()
             if s["earliestMsgPublishTimeInBacklog"] > 0), default=0),
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "ongoingTxnCount": 0,
        "abortedTxnCount": 0,
        "committedTxnCount": 0,
        "publishers": [] if options.exclude_publishers else [
            publisher_stats(p, now_ms) for p in sorted(topic.producers.values(), key=lambda p: p.producer_name)],
        "waitingPublishers": len(topic.waiting_producers),
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": deduplication_status(topic),
        "topicEpoch": topic.topic_epoch if topic.topic_epoch else None,
        "nonContiguousDeletedMessagesRanges": ranges,
        "nonContiguousDeletedMessagesRangesSerializedSize": 16 * ranges,
        "delayedMessageIndexSizeInBytes": sum(
            s["delayedMessageIndexSizeInBytes"] for s in subscriptions.values()),
        "compaction": asdict(topic.compacted.record),
        "ownerBroker": f"{broker.config.advertisedAddress}:"
                       f"{broker.config.webServicePort or broker.config.webServicePortTls}",
    }
    stats.update(lifecycle_stats(broker, topic, now_ms))
    if stats["topicEpoch"] is None:
        del stats["topicEpoch"]
    if not topic.name.persistent:
        stats["msgDropRate"] = 0.0
    return stats


# -- partitioned topics -----------------------------------------------------------------------------
_SUMMED_TOPIC_FIELDS = (
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
    "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize", "waitingPublishers",
    "publishRateLimitedTimes", "offloadedStorageSize", "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize", "delayedMessageIndexSizeInBytes",
    "systemTopicBytesInCounter", "bytesOutInternalCounter")
_SUMMED_SUBSCRIPTION_FIELDS = (
    "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver",
    "messageAckRate", "chunkedMessageRate", "msgBacklog", "backlogSize", "msgBacklogNoDelayed",
    "msgDelayed", "unackedMessages", "msgRateExpired", "totalMsgExpired", "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize", "delayedMessageIndexSizeInBytes")
_SUMMED_CONSUMER_FIELDS = (
    "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver",
    "messageAckRate", "availablePermits", "unackedMessages")
_SUMMED_PUBLISHER_FIELDS = ("msgRateIn", "msgThroughputIn")


def _sum_into(total: Stats, part: Stats, fields: Iterable[str]) -> None:
    for name in fields:
        if name in part:
            total[name] = total.get(name, 0) + part[name]


def _merge_by_name(into: list[Stats], items: list[Stats], key: str, fields: Iterable[str]) -> None:
    """Partitioned producers and consumers have one registration per partition, same name."""
    index = {item.get(key): item for item in into}
    for item in items:
        existing = index.get(item.get(key))
        if existing is None:
            copy = dict(item)
            into.append(copy)
            index[item.get(key)] = copy
        else:
            _sum_into(existing, item, fields)


def aggregate_topic_stats(parts: list[Stats]) -> Stats:
    """Sum per-partition stats the way ``TopicStatsImpl.add`` does."""
    total: Stats = {name: 0 for name in _SUMMED_TOPIC_FIELDS}
    total.update(msgRateIn=0.0, msgThroughputIn=0.0, msgRateOut=0.0, msgThroughputOut=0.0)
    publishers: list[Stats] = []
    subscriptions: dict[str, Stats] = {}
    for part in parts:
        _sum_into(total, part, _SUMMED_TOPIC_FIELDS)
        _merge_by_name(publishers, part["publishers"], "producerName", _SUMMED_PUBLISHER_FIELDS)
        for name, sub in part["subscriptions"].items():
            merged = subscriptions.get(name)
            if merged is None:
                subscriptions[name] = {**sub, "consumers": [dict(c) for c in sub["consumers"]]}
                continue
            _sum_into(merged, sub, _SUMMED_SUBSCRIPTION_FIELDS)
            _merge_by_name(merged["consumers"], sub["consumers"], "consumerName", _SUMMED_CONSUMER_FIELDS)
    rate = total["msgRateIn"]
    total["averageMsgSize"] = total["msgThroughputIn"] / rate if rate else 0.0
    total["msgChunkPublished"] = False
    total["publishers"] = publishers
    total["subscriptions"] = subscriptions
    total["replication"] = {}
    total["earliestMsgPublishTimeInBacklogs"] = min(
        (p["earliestMsgPublishTimeInBacklogs"] for p in parts if p["earliestMsgPublishTimeInBacklogs"] > 0),
        default=0)
    if parts:
        total["deduplicationStatus"] = parts[0]["deduplicationStatus"]
        total.update(_aggregate_lifecycle(parts))
    return total


def _aggregate_lifecycle(parts: list[Stats]) -> Stats:
    """As ``TopicStatsImpl.add``: the quota limits (the same on every partition), the oldest
    backlog message of all partitions, the earliest creation and the latest publish."""
    oldest = max(parts, key=lambda p: p["oldestBacklogMessageAgeSeconds"])
    return {
        "backlogQuotaLimitSize": parts[0]["backlogQuotaLimitSize"],
        "backlogQuotaLimitTime": parts[0]["backlogQuotaLimitTime"],
        "oldestBacklogMessageAgeSeconds": oldest["oldestBacklogMessageAgeSeconds"],
        "oldestBacklogMessageSubscriptionName": oldest["oldestBacklogMessageSubscriptionName"],
        "topicCreationTimeStamp": min(p["topicCreationTimeStamp"] for p in parts),
        "lastPublishTimeStamp": max(p["lastPublishTimeStamp"] for p in parts),
    }


def partitioned_topic_stats(partitions: int, parts: dict[str, Stats], per_partition: bool) -> Stats:
    stats = aggregate_topic_stats(list(parts.values()))
    stats["metadata"] = {"partitions": partitions}
    stats["partitions"] = parts if per_partition else {}
    return stats


# -- internal stats -----------------------------------------------------------------------------------
def deleted_ranges_text(ranges: list[tuple[Position, Position]]) -> str:
    """Pulsar prints acked ranges as a Guava RangeSet: ``[(3:4..3:6], (3:8..3:9]]``."""
    parts = [f"({first.ledger_id}:{first.entry_id - 1}..{last}]" for first, last in ranges]
    return "[" + ", ".join(parts) + "]"


def cursor_internal_stats(topic: Topic, sub: Subscription, entries_added: int) -> Stats:
    cursor = sub.cursor
    last_read = sub.dispatcher.last_read
    read_position = topic.next_position(last_read) if last_read >= cursor.mark_delete \
        else topic.next_position(cursor.mark_delete)
    first_unacked = topic.next_position(cursor.mark_delete)
    since_first = topic.entries_between(first_unacked, last_read) if last_read >= first_unacked else 0
    ranges = cursor.deleted_ranges()
    return {
        "markDeletePosition": str(cursor.mark_delete),
        "readPosition": str(read_position),
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "messagesConsumedCounter": max(0, entries_added - sub.backlog()),
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        "individuallyDeletedMessages": deleted_ranges_text(ranges),
        "lastLedgerSwitchTimestamp": iso_time(0),
        "state": "Open" if sub.durable else "NoLedger",
        "active": bool(sub.consumers),
        "numberOfEntriesSinceFirstNotAckedMessage": since_first + 1,
        "totalNonContiguousDeletedMessagesRange": len(ranges),
        "subscriptionHavePendingRead": False,
        "subscriptionHavePendingReplayRead": False,
        "properties": {k: v for k, v in cursor.properties.items() if isinstance(v, int)},
    }


def dedup_cursor_stats(topic: Topic) -> dict[str, Stats]:
    """Pulsar lists deduplication's ``pulsar.dedup`` cursor with the other cursors: its
    properties are each producer's highest persisted sequence id."""
    dedup = topic.dedup
    if dedup is None or not dedup.is_enabled:
        return {}
    snapshot = topic.dedup_snapshot_position
    return {"pulsar.dedup": {
        "markDeletePosition": str(snapshot) if snapshot is not None else "-1:-1",
        "readPosition": str(snapshot) if snapshot is not None else "-1:-1",
        "waitingReadOp": False, "pendingReadOps": 0, "messagesConsumedCounter": 0, "cursorLedger": -1,
        "cursorLedgerLastEntry": -1, "individuallyDeletedMessages": "[]", "lastLedgerSwitchTimestamp": iso_time(0),
        "state": "NoLedger", "active": False, "numberOfEntriesSinceFirstNotAckedMessage": 0,
        "totalNonContiguousDeletedMessagesRange": 0, "subscriptionHavePendingRead": False,
        "subscriptionHavePendingReplayRead": False, "properties": dict(dedup.highest_sequenced_persisted)}}


def compacted_ledger_stats(topic: Topic) -> Stats:
    """The compacted view's ledger, as Pulsar's internal stats show it (-1: none yet)."""
    view = topic.compacted.view
    return {"ledgerId": view.ledger_id if view is not None else -1,
            "entries": len(view) if view is not None else -1,
            "size": view.size_bytes if view is not None else -1, "offloaded": False, "underReplicated": False}


def internal_stats(topic: Topic) -> Stats:
    ledger = topic.ledger
    ledgers = ledger.ledgers()
    current = ledgers[-1] if ledgers else None
    entries_added = topic.msg_in.total_events
    if current is None:
        last_confirmed = "-1:-1"
    elif current.entries == 0:
        last_confirmed = f"{current.ledger_id}:-1"
    else:
        last_confirmed = str(topic.last_readable() or ledger.last_position())
    return {
        "entriesAddedCounter": entries_added,
        "numberOfEntries": sum(info.entries for info in ledgers),
        "totalSize": ledger.total_size_bytes(),
        "currentLedgerEntries": current.entries if current else 0,
        "currentLedgerSize": current.size_bytes if current else 0,
        "lastLedgerCreatedTimestamp": iso_time(current.timestamp_ms) if current else None,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": len(topic.pending_receipts),
        "lastConfirmedEntry": last_confirmed,
        "state": "LedgerOpened",
        "ledgers": [{"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size_bytes,
                     "offloaded": False, "underReplicated": False, "timestamp": info.timestamp_ms}
                    for info in ledgers],
        "cursors": {**{name: cursor_internal_stats(topic, sub, entries_added)
                       for name, sub in sorted(topic.subscriptions.items())}, **dedup_cursor_stats(topic)},
        "schemaLedgers": [],
        "compactedLedger": compacted_ledger_stats(topic),
    }
