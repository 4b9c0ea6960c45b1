"""The broker as the broker-wide simulation reaches it: one entry point per client command
and one per storage completion or timer, each doing what the shell does for it.

Clients call :class:`BrokerGateway` only through the command methods (``connect`` to
``close_consumer``), so that these can become real protocol commands through core's
command handler once there is one; the storage and time methods are the shell's part
(a write per topic and loop turn, the group committer's syncs and reports, the metadata
writer, the one timer). Topics load on first use, as the broker loads them for a lookup:
cursors from the metadata store, deduplication from its snapshot plus a replay of the
entries after it, an in-memory delayed-delivery index that fills as entries are read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore, CursorWrite
from magnetar.core.dedup.deduplication_config import DeduplicationConfig
from magnetar.core.dedup.topic_dedup import recovered
from magnetar.core.delayed.delayed_delivery import delayed_delivery
from magnetar.core.errors import BrokerError
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.sinks import ConsumerSink
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor_record import CursorRecord
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import publish, topic_activity
from magnetar.core.topics.producer import Producer, ProducerSink
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import AppendFailed
from magnetar.testing.sim.broker_storage import SimLedger, SimStorage, SyncFailed
from magnetar.wire import pulsar_api_pb2 as pb

NAMESPACE = "persistent://public/default/"


class ConnectionSink(ProducerSink, ConsumerSink, Protocol):
    """A client connection as the broker writes to it: the sink of its producers and consumers."""


class BrokerGateway:
    def __init__(self, config: BrokerConfig, storage: SimStorage, dedup_topics: set[str],
                 dedup_config: DeduplicationConfig, loaded: Callable[[Topic], None]) -> None:
        self.config = config
        self.storage = storage
        self.dedup_topics = dedup_topics
        self.dedup_config = dedup_config
        #: told of every topic (re)loaded, before any client reaches it
        self.loaded = loaded
        self.core = self._new_core()
        #: what each connection registered, by the ids its commands name (as the shell's connection)
        self.consumers: dict[tuple[ConnectionSink, int], tuple[Consumer, Subscription]] = {}
        self.producers: dict[tuple[ConnectionSink, int], tuple[Producer, Topic]] = {}

    @property
    def now_ms(self) -> int:
        return self.storage.clock_ms()

    def _new_core(self) -> BrokerCore:
        core = BrokerCore(self.config)
        core.delayed_tick.start(self.now_ms)
        return core

    # -- topics ---------------------------------------------------------------------------
    def topic(self, name: str) -> Topic:
        """The loaded topic, loading it first if needed (a lookup does that)."""
        found = self.core.topics.get(name)
        if found is not None:
            return found
        ledger = self.storage.open(name)
        topic = Topic(TopicName.parse(name), ledger, self.config, dispatcher_factory=self.core.dispatcher_factory)
        for (topic_name, sub_name), record in sorted(self.storage.cursors.items()):
            if topic_name == name:
                sub = topic.create_subscription(sub_name, "Shared", durable=True, mark_delete=record.mark_delete)
                sub.cursor.restore_ranges(record.individually_deleted)
                sub.persisted_version = sub.cursor.version
        self.core.adopt(topic)
        topic.delayed = delayed_delivery(self.config, None)
        if name in self.dedup_topics:
            snapshot = self.storage.dedup_snapshots.get(name)
            topic.dedup = recovered(topic, self.dedup_config, snapshot, self.now_ms)
            topic.dedup_snapshot_position = snapshot.mark_delete if snapshot is not None else None
        self.loaded(topic)
        return topic

    def loaded_topic(self, name: str) -> Topic | None:
        return self.core.topics.get(name)

    # -- client commands -------------------------------------------------------------------
    # Each takes the connection and the ids the command names, as a frame would, and
    # answers through the connection (the sinks) or with the value the reply would carry.
    def connect(self, conn: ConnectionSink) -> None:
        """CONNECT: nothing for core to decide yet (authentication is the shell's)."""

    def disconnect(self, conn: ConnectionSink) -> None:
        """The connection closed: its producers and consumers go with it."""
        for key in [k for k in self.producers if k[0] is conn]:
            self.close_producer(*key)
        for key in [k for k in self.consumers if k[0] is conn]:
            self.close_consumer(*key)

    def create_producer(self, conn: ConnectionSink, producer_id: int, topic_name: str, name: str) -> None:
        """PRODUCER (raises the error the broker answers)."""
        topic = self.topic(topic_name)
        producer = Producer(producer_id, name, conn)
        topic.add_producer(producer)
        self.producers[(conn, producer_id)] = (producer, topic)

    def send(self, conn: ConnectionSink, producer_id: int, sends: list[tuple[int, bytes]]) -> list[Position | None]:
        """The SENDs of one read, (sequence id, entry) each: where each was appended, None for
        one not appended (a duplicate, or refused: answered through the sink either way).

        As the shell does: the read's sends go through the publish path as they came; a
        refusal answers the first send of the call, and the rest go on."""
        producer, topic = self.producers[(conn, producer_id)]
        raw = [(sequence_id, sequence_id, 1, entry) for sequence_id, entry in sends]
        found: list[Position | None] = []
        while len(found) < len(raw):
            rest = raw[len(found):]
            try:
                taken, positions = publish.publish(topic, producer, rest, self.now_ms)
            except BrokerError as exc:
                conn.send_error(producer_id, rest[0][0], exc.code, exc.message)
                found.append(None)
                continue
            found.extend(positions)
            found.extend([None] * (taken - len(positions)))
        return found

    def close_producer(self, conn: ConnectionSink, producer_id: int) -> None:
        found = self.producers.pop((conn, producer_id), None)
        if found is not None:
            producer, topic = found
            topic.remove_producer(producer)

    def subscribe(self, conn: ConnectionSink, consumer_id: int, topic_name: str, sub_name: str, sub_type: str,
                  consumer_name: str) -> None:
        """SUBSCRIBE from the earliest message (raises the error the broker answers)."""
        topic = self.topic(topic_name)
        meta = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT) if sub_type == "Key_Shared" else None
        consumer = Consumer(consumer_id, consumer_name, conn, sub_type=sub_type, key_shared_meta=meta)
        sub = topic.subscribe(sub_name, consumer, self.now_ms, initial_earliest=True)
        self.consumers[(conn, consumer_id)] = (consumer, sub)
        # a new subscription is stored before SUCCESS
        self._store_cursors(self.core.cursor_writes([topic], now_ms=self.now_ms))

    def flow(self, conn: ConnectionSink, consumer_id: int, permits: int) -> None:
        found = self.consumers.get((conn, consumer_id))
        if found is not None:
            consumer, sub = found
            sub.dispatcher.on_flow(consumer, permits, self.now_ms)

    def ack(self, conn: ConnectionSink, consumer_id: int, positions: list[Position],
            cumulative: bool) -> BrokerError | None:
        """ACK: the error the broker answers, if it refuses."""
        found = self.consumers.get((conn, consumer_id))
        if found is not None and positions:
            consumer, sub = found
            try:
                sub.acknowledge(consumer, cumulative, [(pos, None) for pos in positions], self.now_ms)
            except BrokerError as exc:
                return exc
        return None

    def redeliver(self, conn: ConnectionSink, consumer_id: int, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: those positions, or (None) all."""
        found = self.consumers.get((conn, consumer_id))
        if found is not None:
            consumer, sub = found
            sub.redeliver(consumer, positions or None, self.now_ms)

    def seek(self, conn: ConnectionSink, consumer_id: int, target: Position) -> Position | None:
        """SEEK by message id: the mark-delete position it set (None: no such consumer)."""
        found = self.consumers.get((conn, consumer_id))
        if found is None:
            return None
        sub = found[1]
        mark = sub.topic.position_before(target)
        sub.reset_cursor(mark, self.now_ms)
        return mark

    def close_consumer(self, conn: ConnectionSink, consumer_id: int) -> None:
        found = self.consumers.pop((conn, consumer_id), None)
        if found is not None:
            consumer, sub = found
            topic = self.core.topics.get(str(sub.topic.name))
            if topic is not None and topic is sub.topic:
                topic.remove_consumer(sub, consumer, self.now_ms)

    def closed_by_broker(self, conn: ConnectionSink, consumer_id: int | None = None,
                         producer_id: int | None = None) -> None:
        """The broker closed a consumer or producer (a seek, an unload): the connection
        forgets it, as the shell's does when it writes CLOSE_CONSUMER or CLOSE_PRODUCER."""
        if consumer_id is not None:
            self.consumers.pop((conn, consumer_id), None)
        if producer_id is not None:
            self.producers.pop((conn, producer_id), None)

    # -- storage and time (the shell's) ----------------------------------------------------
    def flush(self, name: str) -> Position | None:
        """Write what the topic appended; the position from which a failed write took entries back."""
        topic = self.loaded_topic(name)
        if topic is None:
            return None
        try:
            topic.ledger.flush()
        except AppendFailed as exc:
            topic.appends_taken_back(exc.position, exc.reason)
            return exc.position
        return None

    def sync(self, name: str, keep_written: bool) -> bool:
        """The group committer syncs the topic's ledger; False when the sync failed (the
        topic's waiting sends got errors and it was unloaded; ``keep_written``: what was
        written reached the disk all the same)."""
        topic = self.loaded_topic(name)
        if topic is None:
            return True
        ledger = topic.ledger
        assert isinstance(ledger, SimLedger)
        try:
            self.storage.sync(ledger)
        except SyncFailed as exc:
            if topic.pending_receipts:
                topic.appends_taken_back(topic.pending_receipts[0].pos, f"the write could not be made durable ({exc})")
            self.unload(topic, keep_written)
            return False
        return True

    def complete(self, name: str) -> bool:
        """The group committer's report of the topic's oldest sync reaches the loop."""
        done = self.storage.take_completion(name)
        if done is None:
            return False
        ledger, pos = done
        topic = self.loaded_topic(name)
        if topic is not None and topic.ledger is ledger:
            self.core.on_persisted(name, pos, self.now_ms)
        return True

    def unload(self, topic: Topic, keep_written: bool) -> None:
        name = str(topic.name)
        topic.fenced = True
        topic_activity.close_all_clients(topic)
        self.core.topics.pop(name, None)
        self._store_cursors(self.core.cursor_writes([topic], force=True, now_ms=self.now_ms))
        ledger = topic.ledger
        assert isinstance(ledger, SimLedger)
        ledger.lose_power(keep_written)
        self.storage.forget_completions(name)

    def persist(self, fail: bool = False) -> None:
        """The persist tick: changed cursors, then due deduplication snapshots (``fail``:
        the metadata store refuses the writes, which are made again next time)."""
        writes = self.core.cursor_writes(now_ms=self.now_ms)
        if fail:
            self.core.cursor_write_failed(writes)
            return
        self._store_cursors(writes)
        for topic in self.core.deduplicating_topics():
            dedup = topic.dedup
            snapshot = dedup.maybe_snapshot(self.now_ms) if dedup is not None else None
            if snapshot is None or dedup is None:
                continue
            self.storage.dedup_snapshots[str(topic.name)] = CursorRecord(
                mark_delete=snapshot.position, properties=dict(snapshot.properties))
            dedup.on_snapshot_stored(snapshot, self.now_ms)
            topic.dedup_snapshot_position = snapshot.position

    def _store_cursors(self, writes: list[CursorWrite]) -> None:
        for write in writes:
            self.storage.cursors[(write.topic, write.name)] = write.record

    def fire_timers(self) -> None:
        """The broker's one timer, as the shell runs it: whatever came due by now."""
        for _ in range(16):
            due = self.core.next_deadline_ms()
            if due is None or due > self.now_ms:
                return
            self.core.on_timer(self.now_ms)
            failures, self.core.timers.failures = self.core.timers.failures, []
            if failures:
                raise failures[0][1]

    def crash(self) -> None:
        """Power cut: only synced entries and stored cursors survive; a new broker starts."""
        for topic in list(self.core.topics.values()):
            ledger = topic.ledger
            assert isinstance(ledger, SimLedger)
            ledger.lose_power(False)
        self.storage.forget_completions()
        self.consumers.clear()
        self.producers.clear()
        self.core = self._new_core()

