"""Core decisions of a topic's life, with the clock as an argument: backlog quotas
(resolution, producer refusal, disconnection, eviction), inactive topics, expiring
subscriptions and termination."""

from __future__ import annotations

import pytest
from core_sinks import RecordingSink
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.errors import ServerError, TopicTerminated
from magnetar.core.names import TopicName
from magnetar.core.policies import (
    BacklogQuota,
    InactiveTopicPolicies,
    Policies,
    TopicPolicies,
    backlog_quota,
    backlog_quotas,
    inactive_topics,
)
from magnetar.core.policies.backlog_quota import BacklogQuotas, QuotaLimit
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics import topic_activity
from magnetar.core.topics.backlog import oldest_backlog, topic_backlog_bytes
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

PAYLOAD = b"x" * 100


def new_topic(name: str = "persistent://public/default/t", config: BrokerConfig | None = None) -> Topic:
    ledger = MemoryLedger(name, config=LedgerConfig(max_entries_per_ledger=1000))
    return Topic(TopicName.parse(name), ledger, config or BrokerConfig())


def publish(topic: Topic, count: int, publish_time_ms: int, sink: RecordingSink | None = None) -> Producer:
    producer = Producer(0, "p", sink or RecordingSink())
    topic.add_producer(producer)
    pos = None
    for i in range(count):
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=publish_time_ms), PAYLOAD)
        pos = append_entry(topic, producer, i, i, 1, entry, publish_time_ms)
    if pos is not None:
        topic.on_persisted(pos, publish_time_ms)
    return producer


def quotas(size: int = -1, time_s: int = -1, policy: str = "producer_request_hold") -> BacklogQuotas:
    return BacklogQuotas(QuotaLimit(size, policy), QuotaLimit(time_s, policy))


# -- resolution ------------------------------------------------------------------------------------
def test_quotas_resolve_topic_then_namespace_then_broker() -> None:
    config = BrokerConfig(backlogQuotaDefaultLimitBytes=5000, backlogQuotaDefaultLimitSecond=30,
                          backlogQuotaDefaultRetentionPolicy="producer_exception")
    assert backlog_quota.resolve(TopicPolicies(), Policies(), config) == quotas(5000, 30, "producer_exception")
    namespace = Policies(backlog_quota_map={"destination_storage": BacklogQuota(limitSize=10,
                                                                                policy="consumer_backlog_eviction")})
    resolved = backlog_quota.resolve(TopicPolicies(), namespace, config)
    assert resolved.size == QuotaLimit(10, "consumer_backlog_eviction")
    assert resolved.time == QuotaLimit(30, "producer_exception")
    topic_level = TopicPolicies(backLogQuotaMap={"destination_storage": BacklogQuota(limit=7)})
    assert backlog_quota.resolve(topic_level, namespace, config).size == QuotaLimit(7, "producer_exception")


def test_broker_default_quotas_are_built_once_per_setting_and_follow_a_changed_setting() -> None:
    config = BrokerConfig(backlogQuotaDefaultLimitBytes=5000, backlogQuotaDefaultLimitSecond=30)
    first = backlog_quotas(TopicPolicies(), Policies(), config)
    again = backlog_quotas(TopicPolicies(), Policies(), config)
    assert all(first[kind] is again[kind] for kind in first)
    with pytest.raises(ValidationError):  # shared by every topic, so nobody may change them
        first["destination_storage"].limitSize = 1
    other = backlog_quotas(TopicPolicies(), Policies(), BrokerConfig(backlogQuotaDefaultLimitBytes=9))
    assert other["destination_storage"].limitSize == 9
    assert backlog_quota.resolve(TopicPolicies(), Policies(), config) == quotas(5000, 30)


# -- producers ---------------------------------------------------------------------------------------
def test_producer_refused_with_the_policy_code_only_when_exceeded() -> None:
    topic = new_topic()
    topic.create_subscription("slow", "Exclusive", durable=True, mark_delete=BEFORE_START)
    publish(topic, 10, 1_000)
    backlog = topic_backlog_bytes(topic)
    assert backlog_quota.producer_refusal(topic, quotas(backlog + 1), 1_000) is None
    hold = backlog_quota.producer_refusal(topic, quotas(backlog), 1_000)
    assert hold is not None and hold.code == ServerError.ProducerBlockedQuotaExceededError
    exception = backlog_quota.producer_refusal(topic, quotas(backlog, policy="producer_exception"), 1_000)
    assert exception is not None and exception.code == ServerError.ProducerBlockedQuotaExceededException
    assert backlog_quota.producer_refusal(topic, quotas(1, policy="consumer_backlog_eviction"), 1_000) is None


def test_time_quota_counts_from_the_oldest_unacknowledged_message() -> None:
    topic = new_topic()
    topic.create_subscription("slow", "Exclusive", durable=True, mark_delete=BEFORE_START)
    publish(topic, 3, 1_000)
    oldest = oldest_backlog(topic)
    assert oldest is not None and oldest.subscription == "slow" and oldest.age_s(4_500) == 3
    assert backlog_quota.producer_refusal(topic, quotas(time_s=5), 6_000) is None
    assert backlog_quota.producer_refusal(topic, quotas(time_s=5), 6_001) is not None


def test_no_subscription_means_no_backlog() -> None:
    topic = new_topic()
    publish(topic, 10, 1_000)
    assert topic_backlog_bytes(topic) == 0 and oldest_backlog(topic) is None
    assert backlog_quota.producer_refusal(topic, quotas(0, 0), 10**9) is None


def test_hold_and_exception_disconnect_producers_at_the_check() -> None:
    for policy in ("producer_request_hold", "producer_exception"):
        topic = new_topic()
        topic.create_subscription("slow", "Exclusive", durable=True, mark_delete=BEFORE_START)
        sink = RecordingSink()
        publish(topic, 10, 1_000, sink)
        backlog_quota.enforce(topic, quotas(topic_backlog_bytes(topic) + 1, policy=policy), 2_000)
        assert topic.producers and not sink.closed_producers
        backlog_quota.enforce(topic, quotas(100, policy=policy), 2_000)
        assert not topic.producers and sink.closed_producers == [0]


# -- eviction ---------------------------------------------------------------------------------------------
@given(entries=st.integers(2, 60), fast_acked=st.integers(0, 60), limit_entries=st.integers(1, 40))
def test_size_eviction_moves_only_the_slowest_below_the_quota(entries: int, fast_acked: int,
                                                               limit_entries: int) -> None:
    topic = new_topic()
    slow = topic.create_subscription("slow", "Exclusive", durable=True, mark_delete=BEFORE_START)
    fast = topic.create_subscription("fast", "Exclusive", durable=True, mark_delete=BEFORE_START)
    publish(topic, entries, 1_000)
    last = topic.last_durable
    assert last is not None
    fast.cursor.ack_cumulative(Position(last.ledger_id, min(fast_acked, entries) - 1))
    fast_mark = fast.cursor.mark_delete
    entry_bytes = topic_backlog_bytes(topic) // entries
    limit = limit_entries * entry_bytes
    before = slow.backlog()
    backlog_quota.enforce(topic, quotas(limit, policy="consumer_backlog_eviction"), 2_000)
    if before * entry_bytes >= limit:
        assert topic.quota_evictions["size"] == 1
        assert slow.backlog() < before
        assert topic_backlog_bytes(topic) <= 0.9 * limit
    else:
        assert slow.backlog() == before and topic.quota_evictions["size"] == 0
    assert slow.cursor.mark_delete <= last, "eviction never moves a cursor past the end"
    assert fast.cursor.mark_delete >= fast_mark


def test_time_eviction_expires_what_is_older_than_ninety_percent_of_the_limit() -> None:
    topic = new_topic()
    sub = topic.create_subscription("slow", "Exclusive", durable=True, mark_delete=BEFORE_START)
    publish(topic, 4, 1_000)
    publish_more = Producer(1, "q", RecordingSink())
    topic.add_producer(publish_more)
    entry = make_entry(pb.MessageMetadata(producer_name="q", sequence_id=0, publish_time=9_500), PAYLOAD)
    pos = append_entry(topic, publish_more, 0, 0, 1, entry, 9_500)
    topic.on_persisted(pos, 9_500)
    backlog_quota.enforce(topic, quotas(time_s=10, policy="consumer_backlog_eviction"), 11_001)
    assert sub.backlog() == 1, "the four old messages expired, the recent one stays"
    assert topic.quota_evictions["time"] == 1


def test_broker_core_checks_only_persistent_topics() -> None:
    core = BrokerCore(BrokerConfig())
    persistent = new_topic()
    transient = new_topic("non-persistent://public/default/np")
    for topic in (persistent, transient):
        topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
        publish(topic, 5, 0)
        core.topics[str(topic.name)] = topic
    core.check_backlog_quotas(1_000, lambda topic: quotas(1, policy="producer_exception"))
    assert not persistent.producers and transient.producers


# -- inactive topics and subscriptions -------------------------------------------------------------------
def policies(mode: str = "delete_when_no_subscriptions", seconds: int = 60,
             delete: bool = True) -> InactiveTopicPolicies:
    return InactiveTopicPolicies.model_validate(
        {"inactiveTopicDeleteMode": mode, "maxInactiveDurationSeconds": seconds, "deleteWhileInactive": delete})


def test_inactive_topic_is_due_after_the_duration_seen_by_the_checks() -> None:
    topic = new_topic()
    producer = publish(topic, 1, 0)
    rule = policies(seconds=60)
    assert not inactive_topics.due_for_deletion(topic, rule, 0, 1_000), "a producer keeps it active"
    topic.remove_producer(producer)
    assert not inactive_topics.due_for_deletion(topic, rule, 0, 2_000)  # the clock starts here
    assert not inactive_topics.due_for_deletion(topic, rule, 0, 61_999)
    assert inactive_topics.due_for_deletion(topic, rule, 0, 62_000)
    assert not inactive_topics.due_for_deletion(topic, policies(delete=False), 0, 10**9)
    assert not inactive_topics.due_for_deletion(topic, rule, -1, 10**9), "unlimited retention keeps it"
    assert not inactive_topics.due_for_deletion(topic, rule, 5, 2_000 + 5 * 60_000 - 1)
    assert inactive_topics.due_for_deletion(topic, rule, 5, 2_000 + 5 * 60_000)


def test_delete_modes() -> None:
    topic = new_topic()
    sub = topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    publish(topic, 2, 0)
    topic.producers.clear()
    assert inactive_topics.is_active(topic, "delete_when_no_subscriptions")
    assert inactive_topics.is_active(topic, "delete_when_subscriptions_caught_up"), "it has a backlog"
    sub.skip_all(0)
    assert not inactive_topics.is_active(topic, "delete_when_subscriptions_caught_up")
    consumer = Consumer(1, "c", RecordingSink())
    sub.add_consumer(consumer, 0)
    assert inactive_topics.is_active(topic, "delete_when_subscriptions_caught_up"), "a consumer keeps it active"


def test_activity_restarts_the_inactivity_clock() -> None:
    core = BrokerCore(BrokerConfig())
    topic = new_topic()
    core.topics[str(topic.name)] = topic
    rule = (policies(seconds=10), 0)
    assert core.inactive_topics(0, lambda t: rule) == []
    sub = topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    assert core.inactive_topics(9_000, lambda t: rule) == []
    topic.unsubscribe(sub.name)
    assert core.inactive_topics(18_000, lambda t: rule) == [], "the clock restarted when it had a subscription"
    assert core.inactive_topics(28_000, lambda t: rule) == [topic]


def test_subscriptions_expire_only_without_consumers() -> None:
    core = BrokerCore(BrokerConfig())
    topic = new_topic()
    core.topics[str(topic.name)] = topic
    idle = topic.create_subscription("idle", "Exclusive", durable=True, mark_delete=BEFORE_START)
    busy = topic.create_subscription("busy", "Exclusive", durable=True, mark_delete=BEFORE_START)
    busy.add_consumer(Consumer(1, "c", RecordingSink()), 1_000)
    assert core.expired_subscriptions(1_000, lambda t: 1) == []  # first seen: the idle one's clock starts
    assert core.expired_subscriptions(61_000, lambda t: 1) == []
    assert core.expired_subscriptions(61_001, lambda t: 1) == [(topic, idle)]
    assert core.expired_subscriptions(10**9, lambda t: 0) == [], "0 keeps subscriptions"


# -- termination ------------------------------------------------------------------------------------------
def test_terminate_closes_producers_refuses_sends_and_tells_the_end() -> None:
    topic = new_topic()
    producer_sink = RecordingSink()
    producer = publish(topic, 2, 0, producer_sink)
    consumer_sink = RecordingSink()
    sub = topic.subscribe("s", Consumer(5, "c", consumer_sink, sub_type="Exclusive"), 0, initial_earliest=True)
    last = topic_activity.terminate(topic)
    assert last == topic.last_durable and producer_sink.closed_producers == [0]
    entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=9, publish_time=0), PAYLOAD)
    try:
        append_entry(topic, producer, 9, 9, 1, entry, 0)
        raise AssertionError("a terminated topic accepted a message")
    except TopicTerminated as refused:
        assert refused.code == ServerError.TopicTerminatedError
    consumer = sub.consumers[0]
    sub.dispatcher.on_flow(consumer, 10, 0)
    topic.tell_end_of_topic()
    assert consumer_sink.ended == [], "two messages are still unacknowledged"
    sub.acknowledge(consumer, True, [(last, None)], 0)
    topic.tell_end_of_topic()
    topic.tell_end_of_topic()
    assert consumer_sink.ended == [5], "told once"
    assert topic_activity.terminate(topic) == last, "terminating again answers the same id"


def test_idle_unload_leaves_a_topic_the_deletion_check_takes_first() -> None:
    topic = new_topic()
    rule = policies(seconds=60)
    assert inactive_topics.awaits_deletion(topic, rule, 0, idle_unload_s=300)
    assert not inactive_topics.awaits_deletion(topic, rule, 0, idle_unload_s=30), "unloading comes first"
    assert not inactive_topics.awaits_deletion(topic, rule, 10, idle_unload_s=300), "retention delays deletion"
    assert not inactive_topics.awaits_deletion(topic, policies(delete=False), 0, idle_unload_s=300)
    topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    assert not inactive_topics.awaits_deletion(topic, rule, 0, idle_unload_s=300), "a subscription keeps it"


def test_non_persistent_topics_are_deleted_whatever_the_retention() -> None:
    topic = new_topic("non-persistent://public/default/np")
    rule = policies(seconds=1)
    assert not inactive_topics.due_for_deletion(topic, rule, -1, 0)
    assert inactive_topics.due_for_deletion(topic, rule, -1, 1_000)
