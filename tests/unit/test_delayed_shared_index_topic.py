"""A topic whose subscriptions share one delayed index (``delayedDeliverySharedIndexEnabled``),
through the real dispatchers: indexed once, delivered once per subscription, filtered by
each mark-delete position, snapshots deleted with the last subscription, recovered after
a restart. Time is an argument; snapshots live in memory.
"""

from __future__ import annotations

import pytest
from core_sinks import RecordingSink
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.delayed.bucket_snapshot_storage import MemoryBucketSnapshotStorage
from magnetar.core.delayed.delayed_delivery import DelayedDelivery, delayed_delivery
from magnetar.core.delayed.shared_index import SubscriptionDelayedDeliveryView
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.entries import append_entry
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

BUCKETS = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"




def config(shared: bool = True) -> BrokerConfig:
    return BrokerConfig(
        delayedDeliveryTrackerFactoryClassName=BUCKETS,
        delayedDeliverySharedIndexEnabled=shared,
        delayedDeliveryMinIndexCountPerBucket=2,
        delayedDeliveryMaxIndexesPerBucketSnapshotSegment=2,
        delayedDeliveryTickTimeMillis=10,
        isDelayedDeliveryDeliverAtTimeStrict=True,
    )


class World:
    """One topic over a ledger and a snapshot storage that both survive a restart."""

    def __init__(self, shared: bool = True) -> None:
        self.config = config(shared)
        self.storage = MemoryBucketSnapshotStorage()
        self.ledger = MemoryLedger("t", config=LedgerConfig(max_entries_per_ledger=4))
        self.topic = self.open_topic()
        self.producer = Producer(0, "p", RecordingSink())  # type: ignore[arg-type]
        self.sequence = 0
        self.positions: list[Position] = []

    def open_topic(self) -> Topic:
        topic = Topic(TopicName.parse("t"), self.ledger, self.config)
        topic.delayed = delayed_delivery(self.config, self.storage)
        return topic

    @property
    def delayed(self) -> DelayedDelivery:
        delayed = self.topic.delayed
        assert isinstance(delayed, DelayedDelivery)
        return delayed

    def publish(self, now_ms: int, deliver_at_ms: int | None = None) -> Position:
        meta = pb.MessageMetadata(producer_name="p", sequence_id=self.sequence, publish_time=1)
        if deliver_at_ms is not None:
            meta.deliver_at_time = deliver_at_ms
        pos = append_entry(self.topic, self.producer, self.sequence, self.sequence, 1, make_entry(meta, b"x"), now_ms)
        self.sequence += 1
        self.topic.on_persisted(pos, now_ms)
        self.positions.append(pos)
        return pos

    def join(self, sub: str, now_ms: int, consumer_id: int = 0) -> tuple[Consumer, RecordingSink]:
        sink = RecordingSink()
        consumer = Consumer(consumer_id, sub, sink, sub_type="Shared")  # type: ignore[arg-type]
        subscription = self.topic.subscribe(sub, consumer, now_ms, initial_earliest=True)
        subscription.dispatcher.on_flow(consumer, 1000, now_ms)
        return consumer, sink

    def tick(self, now_ms: int) -> None:
        self.topic.dispatch_all(now_ms)

    def ack(self, sub: str, consumer: Consumer, positions: list[Position], now_ms: int) -> None:
        self.topic.subscriptions[sub].acknowledge(consumer, False, [(p, None) for p in positions], now_ms)

    def persist_record(self) -> dict[str, int]:
        index = self.delayed.shared_index
        return dict(index.properties) if index is not None else {}

    def restart(self, now_ms: int, record: dict[str, int] | None = None) -> None:
        """Reopen the topic from what a broker persists: cursors and the shared record
        (``record``: as last written, which may lag behind the index)."""
        old = self.topic
        if record is None:
            record = self.persist_record()
        cursors = {name: (sub.cursor.mark_delete, dict(sub.cursor.properties), sub.cursor.deleted_ranges())
                   for name, sub in old.subscriptions.items()}
        self.topic = self.open_topic()
        for name, (mark_delete, properties, ranges) in cursors.items():
            sub = self.topic.create_subscription(name, "Exclusive", durable=True,
                                                 mark_delete=mark_delete, properties=properties)
            sub.cursor.restore_ranges(ranges)
        for sub in self.topic.subscriptions.values():
            self.delayed.recover(sub, now_ms)
        if record:
            self.delayed.recover_shared(self.topic, record, now_ms)


def test_two_subscriptions_index_each_message_once_and_each_gets_it_once() -> None:
    w = World()
    _, a = w.join("a", 0)
    _, b = w.join("b", 0, consumer_id=1)
    delayed = [w.publish(0, deliver_at_ms=100 + i) for i in range(10)]
    plain = w.publish(0)
    assert a.messages == b.messages == [plain]
    index = w.delayed.shared_index
    assert index is not None and index.tracker.number_of_delayed_messages == 10
    assert w.storage.bucket_ids(), "sealed buckets are stored once, for the topic"
    assert {s.cursor_name for s in w.storage.snapshots()} == {"pulsar.delayed.index"}
    for sub in w.topic.subscriptions.values():
        assert isinstance(sub.delayed_tracker, SubscriptionDelayedDeliveryView)
        assert not any(sub.cursor.properties)
    w.tick(50)
    assert a.messages == b.messages == [plain]
    for now in range(100, 140, 5):
        w.tick(now)
    assert sorted(a.messages) == sorted(b.messages) == sorted([*delayed, plain])
    assert len(a.messages) == len(b.messages) == 11


def test_the_fan_out_skips_what_a_subscription_already_passed_with_its_mark_delete() -> None:
    w = World()
    _, a = w.join("a", 0)
    _, b = w.join("b", 0, consumer_id=1)
    delayed = [w.publish(0, deliver_at_ms=100) for _ in range(3)]
    # b skips its backlog (mark-delete moves past the delayed messages) before they are due
    w.topic.subscriptions["b"].skip_all(10)
    w.tick(100)
    assert a.messages == delayed
    assert b.messages == []


def test_snapshots_go_with_the_topics_last_subscription() -> None:
    w = World()
    w.join("a", 0)
    w.join("b", 0, consumer_id=1)
    for _ in range(12):
        w.publish(0, deliver_at_ms=10_000)
    index = w.delayed.shared_index
    assert index is not None
    stored = w.storage.bucket_ids()
    assert stored and sorted(index.properties.values()) == stored
    w.topic.unsubscribe("a", force=True)
    assert w.storage.bucket_ids() == stored, "b still needs the index"
    w.topic.unsubscribe("b", force=True)
    assert w.storage.bucket_ids() == []
    assert index.properties == {}


@pytest.mark.parametrize("b_first", [False, True])
def test_recovers_after_a_restart_and_delivers_once_per_subscription_on_time(b_first: bool) -> None:
    w = World()
    ca, a = w.join("a", 0)
    cb, b = w.join("b", 0, consumer_id=1)
    delayed = [w.publish(0, deliver_at_ms=1_000 + 10 * i) for i in range(12)]
    w.ack("a", ca, a.messages, 0)
    w.ack("b", cb, b.messages, 0)
    # the first few come due and reach both before the crash; a acknowledges them, b does not
    w.tick(1_020)
    early = delayed[:3]
    assert sorted(a.messages) == sorted(b.messages) == early
    w.ack("a", ca, early, 1_020)
    stored = w.storage.bucket_ids()
    assert stored
    w.restart(1_025)
    index = w.delayed.shared_index
    assert index is not None
    assert index.tracker.number_of_delayed_messages > 0, "the snapshots came back"
    if b_first:
        _, b2 = w.join("b", 1_025, consumer_id=1)
        _, a2 = w.join("a", 1_025)
    else:
        _, a2 = w.join("a", 1_025)
        _, b2 = w.join("b", 1_025, consumer_id=1)
    assert b2.messages == early, "b's unacknowledged deliveries come again (redelivery)"
    assert a2.messages == []
    for now in range(1_030, 1_200, 10):
        w.tick(now)
        assert all(p in early or delayed.index(p) * 10 + 1_000 <= now for p in a2.messages + b2.messages)
    assert sorted(a2.messages) == delayed[3:]
    assert sorted(b2.messages) == delayed
    assert len(set(b2.messages)) == len(b2.messages)
    w.topic.unsubscribe("a", force=True)
    w.topic.unsubscribe("b", force=True)
    assert w.storage.bucket_ids() == []


def test_a_bucket_list_left_in_a_cursor_from_running_unshared_is_deleted() -> None:
    w = World(shared=False)
    w.join("a", 0)
    delayed = [w.publish(0, deliver_at_ms=1_000) for _ in range(12)]
    assert w.storage.bucket_ids()
    assert any(w.topic.subscriptions["a"].cursor.properties)
    w.config = config(shared=True)
    w.restart(10)
    assert w.storage.bucket_ids() == []
    assert not any(w.topic.subscriptions["a"].cursor.properties)
    _, a = w.join("a", 10)
    w.tick(1_000)
    assert sorted(a.messages) == delayed


def test_a_reader_subscription_leaving_unregisters_its_view() -> None:
    w = World()
    _, a = w.join("a", 0)
    consumer = Consumer(5, "r", RecordingSink(), sub_type="Shared")  # type: ignore[arg-type]
    sub = w.topic.subscribe("r", consumer, 0, durable=False, initial_earliest=True)
    sub.dispatcher.on_flow(consumer, 10, 0)
    w.publish(0, deliver_at_ms=100)
    index = w.delayed.shared_index
    assert index is not None and sorted(index.subscriptions) == ["a", "r"]
    w.topic.remove_consumer(sub, consumer, 1)
    assert index.subscriptions == ["a"]
    assert BEFORE_START < Position(0, 0)


class Checker:
    """Per subscription: what is out at its consumer, what it acknowledged."""

    def __init__(self, w: World, names: list[str]) -> None:
        self.w = w
        self.due: dict[Position, int] = {}
        self.consumers: dict[str, tuple[Consumer, RecordingSink]] = {}
        self.seen: dict[str, int] = {}
        self.out: dict[str, set[Position]] = {name: set() for name in names}
        self.acked: dict[str, set[Position]] = {name: set() for name in names}

    def join(self, name: str, now_ms: int) -> None:
        self.consumers[name] = self.w.join(name, now_ms, consumer_id=len(self.consumers))
        self.seen[name] = 0

    def leave(self, name: str, now_ms: int) -> None:
        consumer, _ = self.consumers.pop(name)
        self.w.topic.remove_consumer(self.w.topic.subscriptions[name], consumer, now_ms)
        self.out[name].clear()

    def check(self, now_ms: int) -> None:
        for name, (_, sink) in self.consumers.items():
            for pos in sink.messages[self.seen[name]:]:
                assert pos not in self.out[name], f"{name}: {pos} sent while out at the consumer"
                assert pos not in self.acked[name], f"{name}: {pos} sent after it was acknowledged"
                assert self.due.get(pos, 0) <= now_ms, f"{name}: {pos} sent before its time"
                self.out[name].add(pos)
            self.seen[name] = len(sink.messages)

    def ack(self, name: str, now_ms: int) -> None:
        consumer, _ = self.consumers[name]
        out = sorted(self.out[name])
        if out:
            self.w.ack(name, consumer, out, now_ms)
            self.acked[name].update(out)
            self.out[name].clear()


ops = st.lists(st.tuples(st.sampled_from(["publish", "plain", "tick", "ack", "rejoin", "persist", "restart"]),
                         st.integers(0, 1), st.integers(0, 120)), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=ops, shared=st.booleans())
def test_every_subscription_gets_every_message_exactly_once_on_time(
        program: list[tuple[str, int, int]], shared: bool) -> None:
    w = World(shared=shared)
    names = ["a", "b"]
    c = Checker(w, names)
    now = 0
    record: dict[str, int] = {}
    lagged = False
    for name in names:
        c.join(name, now)
    for op, who, arg in program:
        name = names[who]
        if op == "publish":
            c.due[w.publish(now, deliver_at_ms=now + arg)] = now + arg
        elif op == "plain":
            w.publish(now)
        elif op == "tick":
            now += arg
            w.tick(now)
        elif op == "ack":
            c.ack(name, now)
        elif op == "rejoin":
            c.leave(name, now)
            c.join(name, now)
        elif op == "persist":
            record = w.persist_record()
        elif op == "restart":
            c.consumers.clear()
            for sub in names:
                c.out[sub].clear()
            lagged = lagged or (shared and record != w.persist_record())
            w.restart(now, record if shared else None)
            for sub in names:
                c.join(sub, now)
        c.check(now)
    for _ in range(4):
        now += 200
        w.tick(now)
        c.check(now)
        for name in names:
            c.ack(name, now)
    published = set(w.positions)
    for name in names:
        assert c.acked[name] == published, f"{name} missed {sorted(published - c.acked[name])}"
        w.topic.unsubscribe(name, force=True)
    if not lagged:
        # a record written before a snapshot was made leaves that snapshot behind; otherwise none is
        assert w.storage.bucket_ids() == []
