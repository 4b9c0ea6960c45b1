"""Reading through the compacted view, the __compaction cursor holding data, the
threshold check and the compaction status."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from core_sinks import RecordingSink
from test_core_dispatch import join, new_topic

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.compaction.compacted_topic import (
    COMPACTION_SUBSCRIPTION,
    CompactedTopic,
    CompactionAlreadyRunning,
    backlog_bytes,
    retained_indexes,
)
from magnetar.core.compaction.compactor import compact
from magnetar.core.errors import NotAllowed
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.topics.managed_ledger import LedgerInfo
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import make_batch
from magnetar.wire.frames import make_entry


class ListView:
    """An in-memory compacted view (the storage one is tested in tests/store)."""

    ledger_id = 1

    def __init__(self, entries: list[tuple[Position, bytes]]) -> None:
        self.entries = dict(entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def size_bytes(self) -> int:
        return sum(len(e) for e in self.entries.values())

    def first_after(self, pos: Position) -> Position | None:
        return min((p for p in self.entries if p > pos), default=None)

    def last_upto(self, pos: Position) -> Position | None:
        return max((p for p in self.entries if p <= pos), default=None)

    def read(self, pos: Position) -> bytes:
        return self.entries[pos]

    def iter_entries(self) -> Iterator[tuple[Position, bytes]]:
        return iter(sorted(self.entries.items()))

    def close(self) -> None: ...


def publish_keys(topic: Topic, keys: list[str]) -> list[Position]:
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    positions = []
    for i, key in enumerate(keys):
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1, partition_key=key),
                           b"v")
        pos = append_entry(topic, producer, i, i, 1, entry, 0)
        topic.on_persisted(pos, 0)
        positions.append(pos)
    return positions


def compacted(topic: Topic) -> Position:
    horizon = topic.last_durable
    assert horizon is not None
    entries = list(topic.ledger.iter_entries(BEFORE_START))
    topic.compacted.begin(0)
    topic.compacted.succeeded(horizon, ListView(list(compact(lambda: entries))), 0, 5)
    return horizon


def test_a_read_compacted_consumer_reads_the_view_then_the_live_topic() -> None:
    topic = new_topic(max_entries_per_ledger=3)
    positions = publish_keys(topic, ["a", "b", "a", "c", "b", "a"])
    compacted(topic)
    _, sink = join(topic, "c", "Exclusive", read_compacted=True, initial_earliest=True)
    assert sink.messages == [positions[3], positions[4], positions[5]]
    live = publish_keys(topic, ["a"])
    assert sink.messages[-1] == live[0]
    _, plain = join(topic, "d", "Exclusive", sub="plain", initial_earliest=True)
    assert plain.messages == positions + live


def test_a_view_whose_topic_ends_at_the_horizon_reports_its_own_last_entry() -> None:
    topic = new_topic()
    positions = publish_keys(topic, ["a", "b", "a"])
    compacted(topic)
    _, sink = join(topic, "c", "Exclusive", read_compacted=True, initial_earliest=True)
    source = topic.subscriptions["s"].source
    assert source.last_readable() == positions[2]
    publish_keys(topic, ["z"])
    assert source.last_readable() == topic.last_durable


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_read_compacted_is_refused_on_shared_types(sub_type: str) -> None:
    topic = new_topic()
    with pytest.raises(NotAllowed, match="readCompacted only allowed on failover or exclusive subscriptions"):
        join(topic, "c", sub_type, read_compacted=True)
    assert topic.subscriptions == {}


def test_the_compaction_cursor_holds_data_like_any_subscription() -> None:
    topic = new_topic(max_entries_per_ledger=2)
    publish_keys(topic, ["a"] * 6)
    consumer_sub = topic.create_subscription("s", "Exclusive", durable=True, mark_delete=BEFORE_START)
    consumer_sub.cursor.ack_cumulative(topic.last_durable)  # type: ignore[arg-type]
    compaction = topic.create_subscription(COMPACTION_SUBSCRIPTION, "Exclusive", durable=True,
                                           mark_delete=BEFORE_START)
    assert topic.apply_retention(0) == []
    compaction.cursor.reset(Position(topic.ledger.ledgers()[1].ledger_id, 1))
    assert len(topic.apply_retention(0)) == 2


def test_status_moves_and_refuses_a_second_run() -> None:
    state = CompactedTopic()
    assert state.state == "NOT_RUN"
    state.begin(100)
    with pytest.raises(CompactionAlreadyRunning, match="Compaction already in progress"):
        state.begin(101)
    state.failed("disk full", 150)
    assert (state.state, state.last_error, state.record.lastCompactionFailedTimestamp,
            state.record.lastCompactionDurationTimeInMills) == ("ERROR", "disk full", 150, 50)
    state.begin(200)
    view = ListView([])
    assert state.succeeded(Position(1, 1), view, 7, 230) is None
    assert (state.state, state.last_error, state.record.lastCompactionRemovedEventCount,
            state.record.lastCompactionSucceedTimestamp) == ("SUCCESS", "", 7, 230)
    state.begin(300)
    assert state.succeeded(Position(1, 2), ListView([]), 0, 310) is view  # the caller deletes it


def test_threshold_check_uses_the_backlog_since_the_last_compaction() -> None:
    core = BrokerCore(BrokerConfig())
    topic = new_topic(max_entries_per_ledger=2)
    core.topics[str(topic.name)] = topic
    publish_keys(topic, ["a"] * 6)
    assert core.topics_to_compact() == []  # threshold 0: off
    size = topic.ledger.total_size_bytes()
    topic.apply_policies(replace(topic.applied, compaction_threshold_bytes=size - 1), 0)
    assert core.topics_to_compact() == [topic]
    compaction = topic.create_subscription(COMPACTION_SUBSCRIPTION, "Exclusive", durable=True,
                                           mark_delete=topic.last_durable)  # type: ignore[arg-type]
    assert core.topics_to_compact() == []
    compaction.cursor.reset(BEFORE_START)
    topic.compacted.begin(0)
    assert core.topics_to_compact() == []  # one at a time


def test_backlog_estimate_counts_whole_later_ledgers_and_part_of_its_own() -> None:
    ledgers = [LedgerInfo(1, 4, 400, 0), LedgerInfo(2, 2, 100, 0), LedgerInfo(3, 0, 0, 0)]
    assert backlog_bytes(ledgers, BEFORE_START) == 500
    assert backlog_bytes(ledgers, Position(1, 0)) == 400
    assert backlog_bytes(ledgers, Position(1, 3)) == 100
    assert backlog_bytes(ledgers, Position(2, 1)) == 0


def test_retained_indexes_of_a_rewritten_batch() -> None:
    records = [(pb.SingleMessageMetadata(compacted_out=i % 3 != 0), b"") for i in range(70)]
    data = make_batch(records)
    entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=70,
                                          uncompressed_size=len(data)), data)
    words = retained_indexes(entry)
    assert words is not None and len(words) == 2
    kept = [i for i in range(70) if (words[i // 64] >> (i % 64)) & 1]
    assert kept == list(range(0, 70, 3))
    plain = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x")
    assert retained_indexes(plain) is None
