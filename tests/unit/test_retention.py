"""Retention as Pulsar 4.x decides it (``ManagedLedgerImpl.internalTrimLedgers``): which
consumed ledgers go, by age and by size, with the clock injected."""

from __future__ import annotations

from core_sinks import RecordingSink
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.names import TopicName
from magnetar.core.policies import AppliedPolicies, Policies, RetentionPolicies, TopicPolicies
from magnetar.core.policies.ledger_trimming import MB, consumed_ledgers, ledgers_to_delete
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.managed_ledger import LedgerInfo
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

MINUTE_MS = 60_000


def retention(minutes: int, size_mb: int) -> RetentionPolicies:
    return RetentionPolicies.model_construct(retentionTimeInMinutes=minutes, retentionSizeInMB=size_mb)


@st.composite
def ledger_lists(draw: st.DrawFn) -> list[LedgerInfo]:
    """Ledgers 1..n, each created some minutes after the one before, sizes in MB."""
    count = draw(st.integers(1, 8))
    created_ms = 0
    ledgers = []
    for ledger_id in range(1, count + 1):
        created_ms += draw(st.integers(0, 30)) * MINUTE_MS
        ledgers.append(LedgerInfo(ledger_id, draw(st.integers(1, 5)), draw(st.integers(0, 4)) * MB, created_ms))
    return ledgers


limits = st.sampled_from([-1, 0, 1, 2, 5, 10, 30])


@given(ledger_lists(), limits, limits, st.integers(0, 400), st.integers(0, 9))
def test_what_goes_is_consumed_and_past_a_limit_and_the_walk_stops_at_the_first_kept(
        ledgers: list[LedgerInfo], minutes: int, size_mb: int, age_minutes: int, slowest_ledger: int) -> None:
    policy = retention(minutes, size_mb)
    now_ms = ledgers[-1].timestamp_ms + age_minutes * MINUTE_MS
    marks = [Position(slowest_ledger, 0)]
    count = ledgers_to_delete(ledgers, marks, policy, now_ms)
    candidates = consumed_ledgers(ledgers, marks)
    assert 0 <= count <= candidates < len(ledgers), "the current ledger is never deleted"
    total = sum(info.size_bytes for info in ledgers)

    def past_a_limit(index: int) -> bool:
        gone = sum(info.size_bytes for info in ledgers[:index + 1])
        expired = minutes >= 0 and now_ms - ledgers[index + 1].timestamp_ms > minutes * MINUTE_MS
        return expired or (size_mb >= 0 and total - gone >= size_mb * MB)
    assert all(past_a_limit(i) for i in range(count))
    if count < candidates:
        assert not past_a_limit(count)
    if minutes == -1 and size_mb == -1:
        assert count == 0, "-1 for both keeps everything"


@given(ledger_lists(), limits, limits, st.integers(0, 400), st.integers(1, 400))
def test_time_passing_never_brings_back_or_keeps_more(ledgers: list[LedgerInfo], minutes: int, size_mb: int,
                                                      age: int, later: int) -> None:
    policy = retention(minutes, size_mb)
    now_ms = ledgers[-1].timestamp_ms + age * MINUTE_MS
    earlier = ledgers_to_delete(ledgers, [], policy, now_ms)
    assert ledgers_to_delete(ledgers, [], policy, now_ms + later * MINUTE_MS) >= earlier


@given(ledger_lists(), st.integers(0, 10))
def test_a_size_limit_alone_keeps_at_least_that_much(ledgers: list[LedgerInfo], size_mb: int) -> None:
    count = ledgers_to_delete(ledgers, [], retention(-1, size_mb), 10**12)
    kept = sum(info.size_bytes for info in ledgers[count:])
    assert count == 0 or kept >= size_mb * MB


def test_consumed_counts_the_ledger_of_the_slowest_cursor_once_its_last_entry_is_acked() -> None:
    ledgers = [LedgerInfo(1, 3, 10, 0), LedgerInfo(2, 3, 10, 0), LedgerInfo(3, 0, 0, 0)]
    assert consumed_ledgers(ledgers, [Position(2, 1)]) == 1
    assert consumed_ledgers(ledgers, [Position(2, 2)]) == 2
    assert consumed_ledgers(ledgers, [Position(2, 2), BEFORE_START]) == 0
    assert consumed_ledgers(ledgers, []) == 2, "without durable cursors every closed ledger is a candidate"
    assert consumed_ledgers(ledgers, [Position(9, 0)]) == 2, "never the current ledger"


def test_zero_limits_delete_what_is_consumed_at_once() -> None:
    ledgers = [LedgerInfo(1, 3, MB, 0), LedgerInfo(2, 3, MB, 0), LedgerInfo(3, 1, MB, 0)]
    assert ledgers_to_delete(ledgers, [Position(2, 2)], retention(0, 0), 1) == 2


def test_kept_while_within_both_limits_deleted_past_either() -> None:
    ledgers = [LedgerInfo(1, 1, 2 * MB, 0), LedgerInfo(2, 1, 2 * MB, 10 * MINUTE_MS),
               LedgerInfo(3, 1, 2 * MB, 20 * MINUTE_MS)]
    keep_an_hour_or_4mb = retention(60, 4)
    at = 30 * MINUTE_MS
    # 6 MB in all: ledger 1 goes for size (4 MB would remain), ledger 2 stays (2 MB < 4 MB would remain)
    assert ledgers_to_delete(ledgers, [], keep_an_hour_or_4mb, at) == 1
    # eighty minutes after ledger 2 closed, it is past the time limit too
    assert ledgers_to_delete(ledgers, [], keep_an_hour_or_4mb, 20 * MINUTE_MS + 61 * MINUTE_MS) == 2
    assert ledgers_to_delete(ledgers, [], retention(60, -1), at) == 0
    assert ledgers_to_delete(ledgers, [], retention(-1, 100), 10**12) == 0


# -- on a topic ---------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def make_topic(clock: Clock, minutes: int, size_mb: int, entries: int = 9) -> Topic:
    config = BrokerConfig()
    topic = Topic(TopicName.parse("persistent://public/default/r"),
                  MemoryLedger("r", config=LedgerConfig(max_entries_per_ledger=3), clock_ms=clock), config)
    topic.apply_policies(AppliedPolicies.resolve(
        TopicPolicies(retentionPolicies=RetentionPolicies(retentionTimeInMinutes=minutes,
                                                          retentionSizeInMB=size_mb)),
        Policies(), config), 0)
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    for i in range(entries):
        clock.now_ms += MINUTE_MS
        entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=clock.now_ms),
                           f"m{i}".encode())
        pos = append_entry(topic, producer, i, i, 1, entry, clock.now_ms)
        topic.on_persisted(pos, clock.now_ms)
    return topic


def test_a_topic_without_subscriptions_keeps_data_for_the_retention_time_then_drops_it() -> None:
    clock = Clock()
    topic = make_topic(clock, minutes=10, size_mb=-1)
    # ledgers 1..3 of 3 entries; ledger 4 is current and empty; ledger 1 closed when 2 opened
    assert topic.apply_retention(clock.now_ms) == []
    clock.now_ms += 10 * MINUTE_MS
    gone = topic.apply_retention(clock.now_ms)
    assert gone and topic.ledger.first_position() == Position(gone[-1] + 1, 0)
    clock.now_ms += 60 * MINUTE_MS
    topic.apply_retention(clock.now_ms)
    assert len(topic.ledger.ledgers()) == 1, "everything but the current ledger, never the current one"


def test_a_durable_subscription_holds_its_backlog_whatever_the_retention() -> None:
    clock = Clock()
    topic = make_topic(clock, minutes=0, size_mb=0)
    sub = topic.create_subscription("s", "Shared", durable=True, mark_delete=Position(1, 1))
    assert topic.apply_retention(clock.now_ms + 10**9) == []
    sub.cursor.ack_cumulative(Position(2, 2))
    assert topic.apply_retention(clock.now_ms + 10**9) == [1, 2]
    assert sub.cursor.mark_delete == Position(2, 2)


def test_a_reader_before_the_first_kept_entry_gets_the_next_available_message() -> None:
    clock = Clock()
    topic = make_topic(clock, minutes=0, size_mb=0)
    reader = topic.create_subscription("reader", "Exclusive", durable=False, mark_delete=BEFORE_START)
    sink = RecordingSink()
    reader.add_consumer(Consumer(1, "c", sink, permits=2), clock.now_ms)  # type: ignore[arg-type]
    reader.dispatcher.dispatch(clock.now_ms)
    assert sink.messages == [Position(1, 0), Position(1, 1)]
    assert topic.apply_retention(clock.now_ms) == [1, 2, 3]
    assert reader.cursor.mark_delete == Position(3, 2), "moved past what was deleted"
    entry = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=99, publish_time=clock.now_ms), b"next")
    pos = append_entry(topic, Producer(1, "q", sink), 99, 99, 1, entry, clock.now_ms)  # type: ignore[arg-type]
    topic.on_persisted(pos, clock.now_ms)
    reader.consumers[0].permits += 5
    reader.dispatcher.dispatch(clock.now_ms)
    assert sink.messages[2:] == [pos], "the next message there is, nothing from the deleted ledgers"


def test_entries_not_yet_durable_are_never_deleted() -> None:
    clock = Clock()
    topic = make_topic(clock, minutes=0, size_mb=0, entries=0)
    producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
    positions = [append_entry(topic, producer, i, i, 1, make_entry(pb.MessageMetadata(
        producer_name="p", sequence_id=i, publish_time=1), b"x"), 0) for i in range(4)]
    assert topic.apply_retention(clock.now_ms + MINUTE_MS) == [], "ledger 1 rolled over but is not synced"
    topic.on_persisted(positions[-1], 0)
    assert topic.apply_retention(clock.now_ms + MINUTE_MS) == [1]
