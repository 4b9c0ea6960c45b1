"""Which ledgers a topic may delete: only those every durable cursor consumed, deduplication's included."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START
from magnetar.core.subscriptions import cursor_moves
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry


class NullSink:
    def send_receipt(self, *args: object) -> None: ...
    def send_receipts(self, *args: object) -> None: ...
    def send_error(self, *args: object) -> None: ...
    def close_producer(self, *args: object) -> None: ...
    def producer_ready(self, *args: object) -> None: ...


NOW = 10**12


def topic_with_entries(n: int) -> Topic:
    ledger = MemoryLedger("t", config=LedgerConfig(max_entries_per_ledger=3), clock_ms=lambda: 0)
    topic = Topic(TopicName.parse("t"), ledger, BrokerConfig())
    producer = Producer(0, "p", NullSink())  # type: ignore[arg-type]
    for i in range(n):
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1), b"x")
        pos = append_entry(topic, producer, i, i, 1, entry, 0)
    topic.on_persisted(pos, 0)
    return topic


def test_consumed_ledgers_are_deleted_but_not_past_the_dedup_snapshot() -> None:
    topic = topic_with_entries(10)
    sub = topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    sub.cursor.ack_cumulative(topic.last_durable)  # type: ignore[arg-type]
    topic.dedup = object()  # type: ignore[assignment]
    first = topic.ledger.first_position()
    topic.dedup_snapshot_position = first
    assert topic.apply_retention(NOW) == []
    topic.dedup = None
    assert topic.apply_retention(NOW) != []


def test_last_message_id_survives_trimming_of_its_ledger(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from magnetar.server.broker_service import BrokerService
    broker = BrokerService(BrokerConfig(managedLedgerMaxEntriesPerLedger=3), tmp_path / "data")
    topic = topic_with_entries(6)
    topic.ledger.roll_over()
    last = topic.last_durable
    sub = topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    sub.cursor.ack_cumulative(last)  # type: ignore[arg-type]
    assert topic.apply_retention(NOW)
    assert cursor_moves.last_message_id(topic) == (last, -1)
    broker.metadata.close()


def test_stats_say_recovering_while_deduplication_replays(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from magnetar.admin.stats import deduplication_status
    from magnetar.core.dedup.message_deduplication import MessageDeduplication
    from magnetar.core.errors import ServiceNotReady
    from magnetar.core.topics import admission
    from magnetar.server.broker_service import BrokerService
    broker = BrokerService(BrokerConfig(), tmp_path / "data")
    topic = topic_with_entries(1)
    assert deduplication_status(topic) == "Disabled"
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    topic.dedup = dedup
    assert deduplication_status(topic) == "Recovering"
    with pytest.raises(ServiceNotReady):
        admission.check_producer(topic, broker.policies, NOW)
    dedup.begin_recovery({})
    dedup.finish_recovery(0)
    assert deduplication_status(topic) == "Enabled"
    admission.check_producer(topic, broker.policies, NOW)
    broker.metadata.close()
