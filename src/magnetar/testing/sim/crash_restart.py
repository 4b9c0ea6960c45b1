"""Broker crashes and restarts under deduplicating producers and a Shared subscription.

The real core (BrokerCore, its timer and cursor-persist decisions, the publish path with
producer deduplication, topics, dispatch) runs over the storage twin: a crash keeps only
what was synced (ledger entries) or written (cursor records and the deduplication
snapshot, which the broker writes through its metadata writer), and the restart opens
the topic from that, as the broker does: cursors restored, deduplication recovered from
its snapshot plus a replay of the newer entries. Clients behave as the official ones do:
a producer resends every send not yet receipted after a reconnect, in order; a consumer
loses what it had not acknowledged.

Retention runs too (the broker's default: consumed ledgers go at the next check); as in the
broker, the detached ledgers' data is removed only once the cursors that moved past them
are written, so a crash in between finds it again.

Checked at every step and at the end: a receipted message is never lost, even by a
crash, unless retention deleted it after the subscription and deduplication's snapshot
had passed it; no sequence id of a producer is stored twice; a cursor never runs ahead of
what consumers acknowledged; once faults stop, everything is stored once and consumed.
One seed reproduces a run: ``python -m magnetar.testing.sim.crash_restart --seed 7``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.topic_dedup import recovered
from magnetar.core.errors import BrokerError
from magnetar.core.names import TopicName
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.topics import publish
from magnetar.core.topics.managed_ledger import LedgerConfig
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.memory_ledger import MemoryLedger, MemoryLedgerFactory
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.batch import make_batch
from magnetar.wire.frames import make_entry, peek_metadata

TOPIC = TopicName.parse("persistent://public/default/crash")
SUB = "s"


class Violation(AssertionError):
    """The broker broke one of the promises this simulation checks."""


@dataclass(eq=False)
class SimProducer:
    """A producer as its application sees it: what it sent and what came back."""

    name: str
    next_sequence_id: int = 0
    #: sends not yet receipted, in order: (first sequence id, messages in the entry)
    outstanding: list[tuple[int, int]] = field(default_factory=list)
    receipted: dict[int, Position] = field(default_factory=dict)
    #: receipts on their way to the client; a crash loses them, so the client resends
    in_flight: list[tuple[int, Position]] = field(default_factory=list)
    core: Producer | None = None

    def take_receipts(self) -> None:
        for sequence_id, pos in self.in_flight:
            self.outstanding = [(s, n) for s, n in self.outstanding if s != sequence_id]
            if pos.ledger_id >= 0:
                self.receipted[sequence_id] = pos
        self.in_flight.clear()

    # -- ProducerSink ----------------------------------------------------------------
    def send_receipt(self, producer_id: int, sequence_id: int, highest: int, pos: Position) -> None:
        self.in_flight.append((sequence_id, pos))

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        self.in_flight += ((sequence_id, pos) for sequence_id, _, pos in receipts)

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        """The send stays outstanding: the client resends it."""

    def close_producer(self, producer_id: int) -> None: ...

    def producer_ready(self, producer: Producer) -> None: ...


@dataclass(eq=False)
class SimConsumer:
    name: str
    core: Consumer | None = None
    inbox: list[Position] = field(default_factory=list)

    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        self.inbox.append(pos)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def reached_end_of_topic(self, consumer_id: int) -> None: ...

    def close_consumer(self, consumer_id: int) -> None: ...


@dataclass
class CrashWorld:
    seed: int
    rng: random.Random
    now_ms: int = 1_000
    config: BrokerConfig = field(default_factory=BrokerConfig)
    factory: MemoryLedgerFactory | None = None
    #: what the metadata store holds: cursor records and the dedup snapshot
    cursors: dict[str, CursorRecord] = field(default_factory=dict)
    dedup_snapshot: CursorRecord | None = None
    core: BrokerCore | None = None
    topic: Topic | None = None
    producers: list[SimProducer] = field(default_factory=list)
    consumers: list[SimConsumer] = field(default_factory=list)
    #: positions some consumer acknowledged (the cursor may never be ahead of these)
    acked: set[Position] = field(default_factory=set)
    crashes: int = 0
    steps: int = 0
    #: per producer, the sequence ids retention deleted (consumed, and behind the snapshot)
    retired: dict[str, set[int]] = field(default_factory=dict)
    #: the last entry retention detached, and the last one whose data is removed
    detached_upto: Position = BEFORE_START
    removed_upto: Position = BEFORE_START
    dedup_config: DeduplicationConfig = field(default_factory=DeduplicationConfig)

    # -- the broker's life ----------------------------------------------------------------
    def start(self) -> None:
        self.factory = MemoryLedgerFactory(clock_ms=lambda: self.now_ms,
                                           config=LedgerConfig(max_entries_per_ledger=self.rng.choice([3, 10, 1000])))
        self.producers = [SimProducer(f"p{i}") for i in range(self.rng.randint(1, 3))]
        # snapshots every few entries too, so restarts recover from snapshot plus replay
        self.dedup_config = DeduplicationConfig(entries_interval=self.rng.choice([2, 7, 1000]))
        self.consumers = [SimConsumer(f"c{i}") for i in range(2)]
        self.open_broker()

    def open_broker(self) -> None:
        assert self.factory is not None
        self.core = BrokerCore(self.config)
        ledger = self.factory.open(str(TOPIC))
        topic = Topic(TOPIC, ledger, self.config, dispatcher_factory=self.core.dispatcher_factory)
        self.core.adopt(topic)
        for name, record in self.cursors.items():
            sub = topic.create_subscription(name, "Shared", durable=True, mark_delete=record.mark_delete)
            sub.cursor.restore_ranges(record.individually_deleted)
            sub.persisted_version = sub.cursor.version
        topic.dedup = recovered(topic, self.dedup_config, self.dedup_snapshot, self.now_ms)
        self.topic = topic
        for producer in self.producers:
            producer.core = Producer(1, producer.name, producer)
            topic.add_producer(producer.core)
            self.resend_all(producer)
        for consumer in self.consumers:
            consumer.inbox.clear()
            consumer.core = Consumer(1, consumer.name, consumer, sub_type="Shared")
            topic.subscribe(SUB, consumer.core, self.now_ms, initial_earliest=True)
            topic.subscriptions[SUB].dispatcher.on_flow(consumer.core, 1000, self.now_ms)
        self.persist_cursors()  # a new subscription is stored before SUCCESS

    def crash(self) -> None:
        assert self.topic is not None and isinstance(self.topic.ledger, MemoryLedger)
        self.topic.ledger.crash()
        self.crashes += 1
        for producer in self.producers:
            producer.in_flight.clear()  # the connection died with them
        self.open_broker()
        self.check_cursor_not_ahead()
        self.detached_upto = self.removed_upto  # what was detached and not removed is back
        stored = self.cursors.get(SUB)
        if stored is not None and stored.mark_delete < self.removed_upto:
            raise Violation(f"the stored cursor stands at {stored.mark_delete}, in data removed up to "
                            f"{self.removed_upto}")

    # -- clients ----------------------------------------------------------------------------
    def send(self, producer: SimProducer, first: int, count: int) -> None:
        assert self.topic is not None and producer.core is not None
        metadata = pb.MessageMetadata(producer_name=producer.name, sequence_id=first, publish_time=self.now_ms)
        payload = b"x"
        if count > 1:
            metadata.num_messages_in_batch = count
            metadata.highest_sequence_id = first + count - 1
            payload = make_batch([(pb.SingleMessageMetadata(payload_size=1, sequence_id=first + i), b"x")
                                  for i in range(count)])
        entry = make_entry(metadata, payload)
        if (first, count) not in producer.outstanding:
            producer.outstanding.append((first, count))
        try:
            publish.publish(self.topic, producer.core, [(first, first + count - 1, count, entry)], self.now_ms)
        except BrokerError:
            pass  # refused (deduplication cannot judge yet): the client resends later

    def publish_new(self, producer: SimProducer) -> None:
        count = self.rng.choice([1, 1, 1, 3])
        first = producer.next_sequence_id
        producer.next_sequence_id += count
        self.send(producer, first, count)

    def resend_all(self, producer: SimProducer) -> None:
        for first, count in list(producer.outstanding):
            self.send(producer, first, count)

    def persist(self) -> None:
        assert self.topic is not None
        self.topic.ledger.flush()
        upto = self.topic.ledger.sync()
        if upto is not None:
            self.topic.on_persisted(upto, self.now_ms)

    def consume(self, consumer: SimConsumer, ack_fraction: float) -> None:
        assert self.topic is not None and consumer.core is not None
        sub = self.topic.subscriptions[SUB]
        taken, consumer.inbox = consumer.inbox, []
        acks = [pos for pos in taken if self.rng.random() < ack_fraction]
        if acks:
            sub.acknowledge(consumer.core, False, [(pos, None) for pos in acks], self.now_ms)
            self.acked.update(acks)
        rest = [pos for pos in taken if pos not in set(acks)]
        if rest:
            sub.redeliver(consumer.core, rest, self.now_ms)
        sub.dispatcher.on_flow(consumer.core, len(taken), self.now_ms)

    def persist_cursors(self) -> None:
        """Write what changed, then remove what retention detached (the shell's order)."""
        assert self.core is not None and self.topic is not None
        for write in self.core.cursor_writes(now_ms=self.now_ms):
            self.cursors[write.name] = write.record
        dedup = self.topic.dedup
        snapshot = dedup.maybe_snapshot(self.now_ms) if dedup is not None else None
        if snapshot is not None and dedup is not None:
            self.dedup_snapshot = CursorRecord(mark_delete=snapshot.position, properties=dict(snapshot.properties))
            dedup.on_snapshot_stored(snapshot, self.now_ms)
            self.topic.dedup_snapshot_position = snapshot.position
        if self.topic.ledger.remove_detached():
            self.removed_upto = self.detached_upto

    def retention(self) -> None:
        """The retention check; what it detaches must be consumed and behind the snapshot."""
        assert self.topic is not None
        before = self.entries()
        if not self.topic.apply_retention(self.now_ms):
            return
        sub = self.topic.subscriptions[SUB]
        snapshot = self.topic.dedup_snapshot_position or BEFORE_START
        for pos, (producer, ids) in before.items() - self.entries().items():
            if not sub.cursor.is_acked(pos) or pos > snapshot:
                raise Violation(f"retention deleted {pos}, which the subscription or the snapshot still needs")
            self.retired.setdefault(producer, set()).update(ids)
            self.detached_upto = max(self.detached_upto, pos)

    def tick(self, ms: int) -> None:
        assert self.core is not None
        self.now_ms += ms
        self.core.on_timer(self.now_ms)

    # -- checks -----------------------------------------------------------------------------
    def entries(self) -> dict[Position, tuple[str, tuple[int, ...]]]:
        """Every entry in the ledger: its producer and sequence ids."""
        assert self.topic is not None
        found = {}
        for pos, entry in self.topic.ledger.iter_entries(BEFORE_START):
            metadata = peek_metadata(entry)
            count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
            found[pos] = (metadata.producer_name, tuple(range(metadata.sequence_id, metadata.sequence_id + count)))
        return found

    def stored(self) -> dict[str, list[int]]:
        """Every sequence id in the ledger, per producer."""
        ids: dict[str, list[int]] = {}
        for producer, sequence_ids in self.entries().values():
            ids.setdefault(producer, []).extend(sequence_ids)
        return ids

    def check_stored(self) -> None:
        stored = self.stored()
        for producer in self.producers:
            ids = stored.get(producer.name, [])
            if len(ids) != len(set(ids)):
                twice = sorted({i for i in ids if ids.count(i) > 1})
                raise Violation(f"{producer.name}: sequence ids stored twice: {twice[:5]}")
            lost = sorted(set(producer.receipted) - set(ids) - self.retired.get(producer.name, set()))
            if lost:
                raise Violation(f"{producer.name}: receipted and lost: {lost[:5]}")

    def check_cursor_not_ahead(self) -> None:
        assert self.topic is not None
        cursor = self.topic.subscriptions[SUB].cursor
        pos = self.topic.ledger.first_position()
        last = self.topic.ledger.last_position()
        while pos is not None and last is not None and pos <= last:
            if cursor.is_acked(pos) and pos not in self.acked:
                raise Violation(f"the cursor acknowledges {pos}, which no consumer acknowledged")
            pos = self.topic.next_position(pos)

    def liveness(self) -> None:
        """Faults off: resend, sync and consume until everything is stored once and consumed."""
        for _ in range(200):
            for producer in self.producers:
                producer.take_receipts()
                self.resend_all(producer)
            self.persist()
            for producer in self.producers:
                producer.take_receipts()
            for consumer in self.consumers:
                self.consume(consumer, 1.0)
            self.persist_cursors()
            self.tick(50)
            if all(not p.outstanding for p in self.producers) and self.topic is not None \
                    and self.topic.subscriptions[SUB].backlog() == 0 and not any(c.inbox for c in self.consumers):
                break
        self.check_stored()
        stored = self.stored()
        for producer in self.producers:
            missing = sorted(set(range(producer.next_sequence_id)) - set(stored.get(producer.name, []))
                             - self.retired.get(producer.name, set()))
            if missing or producer.outstanding:
                raise Violation(f"{producer.name}: never stored {missing[:5]}, "
                                f"still waiting {producer.outstanding[:3]}")
        assert self.topic is not None
        backlog = self.topic.subscriptions[SUB].backlog()
        if backlog:
            raise Violation(f"stuck: {backlog} entries never consumed")


def run(seed: int, steps: int = 200) -> CrashWorld:
    """One schedule; raises Violation (with the seed) when a promise breaks."""
    world = CrashWorld(seed, random.Random(seed))
    world.start()
    actions = [("publish", 30), ("resend", 5), ("persist", 20), ("receipts", 15), ("consume", 15),
               ("cursors", 8), ("tick", 8), ("crash", 3), ("retention", 4)]
    names, weights = zip(*actions, strict=True)
    try:
        for _ in range(steps):
            world.steps += 1
            action = world.rng.choices(names, weights)[0]
            producer = world.rng.choice(world.producers)
            if action == "publish":
                world.publish_new(producer)
            elif action == "resend":
                world.resend_all(producer)
            elif action == "persist":
                world.persist()
            elif action == "receipts":
                producer.take_receipts()
            elif action == "consume":
                world.consume(world.rng.choice(world.consumers), world.rng.random())
            elif action == "cursors":
                world.persist_cursors()
            elif action == "tick":
                world.tick(world.rng.randint(1, 2000))
            elif action == "retention":
                world.retention()
            else:
                world.crash()
            world.check_stored()
        world.liveness()
    except Violation as exc:
        raise Violation(f"seed {seed} at step {world.steps}: {exc}") from None
    return world


def main() -> None:
    parser = argparse.ArgumentParser(description="Crash-and-restart schedules under deduplicating producers.")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--schedules", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    started, failures, crashes = time.monotonic(), 0, 0
    for seed in range(args.seed, args.seed + args.schedules):
        try:
            crashes += run(seed, args.steps).crashes
        except Violation as exc:
            failures += 1
            print(exc, file=sys.stderr)
    print(json.dumps({"first_seed": args.seed, "schedules": args.schedules, "violations": failures,
                      "crashes": crashes, "seconds": round(time.monotonic() - started, 1)}))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
