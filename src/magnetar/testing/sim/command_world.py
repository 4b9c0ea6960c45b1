"""The whole broker under simulation: clients on several connections send real commands
(PRODUCER, SEND, SUBSCRIBE of all four types, FLOW, ACK individual and cumulative,
REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK, CLOSE_PRODUCER, CLOSE_CONSUMER, UNSUBSCRIBE) to
core's command handlers over :class:`~.command_shell_twin.SimBroker`, while the schedule
completes storage work in any order the real broker allows, fails writes and syncs, and
crashes and restarts the broker.

In the manner of TigerBeetle's VOPR: one seed derives the options (topics, deduplication,
subscription types, clients, fault weights) and the whole schedule; a safety phase runs
with faults on, every frame the broker writes checked as it is read
(:mod:`.command_checkers`); then a liveness phase turns faults off and everything must
drain: every send receipted, every receipted message consumed by every subscription that
was there before it. The clients behave as the official ones do: a producer resends what
was not receipted after any error or reconnect (closing its connection on a send error,
as the Java client does), a consumer subscribes again when the broker closes it.

    python -m magnetar.testing.sim.command_world --seed 7
    python -m magnetar.testing.sim.command_world --seed 1 --schedules 10000 --jobs 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.positions import Position
from magnetar.core.topics.handover import DeliveryDrain
from magnetar.core.topics.publish import stored_metadata
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.testing.sim.client_reads import ClientReads, describe
from magnetar.testing.sim.command_checkers import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    CommandChecker,
    CommandViolation,
    StoredEntry,
)
from magnetar.testing.sim.command_clients import ConsumerClient, ProducerClient
from magnetar.testing.sim.command_shell_twin import SimBroker, SimStorage
from magnetar.testing.sim.sim_connection import Message, SimConnection, Written
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

T = pb.BaseCommand
SUB_TYPES = {EXCLUSIVE: pb.CommandSubscribe.Exclusive, SHARED: pb.CommandSubscribe.Shared,
             FAILOVER: pb.CommandSubscribe.Failover, KEY_SHARED: pb.CommandSubscribe.Key_Shared}
NAMESPACE = "persistent://public/default/"
C = TypeVar("C", "ProducerClient", "ConsumerClient", "ProducerClient | ConsumerClient")


@dataclass
class CommandOptions:
    seed: int
    steps: int
    topics: int
    dedup_topics: int
    entries_per_ledger: int
    dedup_entries_interval: int
    #: (topic index, subscription name, type) for every subscription
    subscriptions: list[tuple[int, str, str]]
    #: consumers per subscription
    consumers_per_sub: int
    producers_per_topic: int
    keys: int
    delayed_fraction: float
    weights: dict[str, float]
    strict_delivery_time: bool
    #: broker settings the seed varies: Key_Shared's selector, unacked limits (the classic
    #: Key_Shared implementation promises less and is left to the subscription-level simulation)
    consistent_hashing: bool = True
    max_unacked_per_consumer: int = 50000

    @classmethod
    def from_seed(cls, seed: int, steps: int | None = None) -> CommandOptions:
        rng = random.Random(seed)
        topics = rng.randint(1, 3)
        types = [EXCLUSIVE, SHARED, FAILOVER, KEY_SHARED]
        subscriptions = []
        for i in range(topics):
            for j, sub_type in enumerate(rng.sample(types, rng.randint(1, 3))):
                subscriptions.append((i, f"s{j}-{sub_type.lower()}", sub_type))
        faults = rng.choice([0.0, 0.5, 1.0, 2.0])
        weights = {
            "send": 30, "receive": 20, "ack": 14, "ack_cumulative": 3, "nack": 4, "seek": 1.5, "unsubscribe": 0.7,
            "close_consumer": 1.5, "close_producer": 1, "stats": 1, "disconnect": 1 * faults, "rejoin": 6,
            "load": 6, "metadata": 10, "write": 14, "sync": 12, "report": 12, "tick": 6,
            "write_fail": 1.5 * faults, "sync_fail": 0.7 * faults, "crash": 0.5 * faults, "handover": 1,
        }
        return cls(
            seed=seed, steps=steps if steps is not None else rng.choice([80, 150, 300]), topics=topics,
            dedup_topics=rng.randint(0, topics), entries_per_ledger=rng.choice([3, 10, 1000]),
            dedup_entries_interval=rng.choice([2, 7, 1000]), subscriptions=subscriptions,
            consumers_per_sub=rng.randint(1, 3), producers_per_topic=rng.randint(1, 2), keys=rng.choice([2, 5, 50]),
            delayed_fraction=rng.choice([0.0, 0.0, 0.2]), weights=weights, strict_delivery_time=rng.random() < 0.5,
            consistent_hashing=rng.random() < 0.7,
            max_unacked_per_consumer=rng.choice([50000, 50000, 3]))


class CommandWorld:
    def __init__(self, options: CommandOptions, checker: CommandChecker | None = None) -> None:
        self.options = options
        self.rng = random.Random(options.seed ^ 0x5EED)
        self.now = 1_000
        self.config = BrokerConfig(
            isDelayedDeliveryDeliverAtTimeStrict=options.strict_delivery_time,
            subscriptionKeySharedUseConsistentHashing=options.consistent_hashing,
            maxUnackedMessagesPerConsumer=options.max_unacked_per_consumer)
        slack_ms = 0 if options.strict_delivery_time else self.config.delayedDeliveryTickTimeMillis
        self.checker = checker or CommandChecker(self.config.subscriptionKeySharedUseClassicPersistentImplementation,
                                                 slack_ms)
        self.storage = SimStorage(self.config, lambda: self.now,
                                  LedgerConfig(max_entries_per_ledger=options.entries_per_ledger))
        self.storage.ledgers.on_append = self._appended
        self.storage.ledgers.on_take_back = lambda name, first: self.checker.lost_from(name, first)
        self.topic_names = [f"{NAMESPACE}t{i}" for i in range(options.topics)]
        for i, name in enumerate(self.topic_names):
            dedup = i < options.dedup_topics
            self.checker.topic(name, dedup)
            if dedup:
                self.storage.metadata.put_topic_policies(name, {"deduplicationEnabled": True})
        self.broker = SimBroker(self.storage, options.dedup_entries_interval)
        self.producers = [ProducerClient(f"p{t}-{i}", name, f"p{t}-{i}", t < options.dedup_topics)
                          for t, name in enumerate(self.topic_names) for i in range(options.producers_per_topic)]
        self.consumers = [ConsumerClient(f"c{t}-{sub}-{i}", self.topic_names[t], sub, sub_type, f"c{t}-{sub}-{i}",
                                         self.rng.choice([1, 3, 10, 100]))
                          for t, sub, sub_type in options.subscriptions for i in range(options.consumers_per_sub)]
        self.clients: list[ProducerClient | ConsumerClient] = [*self.producers, *self.consumers]
        self.by_address = {client.address: client for client in self.clients}
        self.connections: dict[str, SimConnection] = {}
        #: what the broker wrote to any connection, in the order written
        self.written: deque[tuple[SimConnection, Written]] = deque()
        self.crashes = self.write_failures = self.sync_failures = self.send_errors = self.handovers = 0
        #: topics being handed over: their drains, and those finished (topic, drained)
        self.draining: dict[str, DeliveryDrain] = {}
        self.drained: list[tuple[Topic, bool]] = []
        self.steps_done = 0
        self.trace = hashlib.sha256()
        #: when a list, every step and every frame read is written here (``--trace``)
        self.events: list[str] | None = None
        self.reads = ClientReads(self)

    # -- storage observed ---------------------------------------------------------------
    def _appended(self, name: str, positions: list[Position], entries: Sequence[bytes]) -> None:
        stored = []
        for pos, entry in zip(positions, entries, strict=False):
            metadata = stored_metadata(entry)
            deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None
            stored.append(StoredEntry(pos, (name, metadata.producer_name, metadata.sequence_id),
                                      metadata.partition_key, deliver_at))
        self.checker.appended(name, stored)

    # -- connections ----------------------------------------------------------------------
    def _connection(self, address: str) -> SimConnection:
        conn = self.connections.get(address)
        if conn is None or conn.closed:
            # CONNECT is the shell's: connected at once
            conn = self.connections[address] = SimConnection(self.broker, address, self.written)
        return conn

    def _handle(self, conn: SimConnection, cmd: pb.BaseCommand) -> None:
        conn.handle(cmd)
        self.reads.read_all()

    def consumer_gone(self, client: ConsumerClient) -> None:
        if client.state in ("ready", "subscribing"):
            self.checker.detached(client.key)
        if client.state != "gone":
            client.state = "closed"
        client.queue.clear()
        client.held.clear()

    def send(self, client: ProducerClient | ConsumerClient, cmd: pb.BaseCommand) -> None:
        assert client.conn is not None
        if self.events is not None:
            self.events.append(f"  {client.address} -> {' '.join(describe(cmd).split())}")
        self._handle(client.conn, cmd)

    def drop_connection(self, client: ProducerClient | ConsumerClient) -> None:
        conn = client.conn
        if conn is None:
            return
        if isinstance(client, ConsumerClient):
            self.consumer_gone(client)
        else:
            client.state = "closed"
            client.in_flight.clear()
        client.conn = None
        conn.close()

    # -- producer steps -----------------------------------------------------------------------
    def _create_producer(self, client: ProducerClient) -> None:
        client.conn = self._connection(client.address)
        client.state = "creating"
        client.request_id += 1
        self.send(client, T(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=client.topic, producer_id=client.producer_id, request_id=client.request_id,
            producer_name=client.name)))

    def _new_entry(self, client: ProducerClient, seq: int) -> bytes:
        metadata = pb.MessageMetadata(producer_name=client.name, sequence_id=seq, publish_time=self.now,
                                      partition_key=f"k{self.rng.randrange(self.options.keys)}")
        if self.rng.random() < self.options.delayed_fraction:
            metadata.deliver_at_time = self.now + self.rng.randint(1, 3000)
        return make_entry(metadata, b"m")

    def step_send(self, client: ProducerClient) -> bool:
        if client.state != "ready":
            return False
        fresh = []
        for _ in range(self.rng.choice([1, 1, 2, 4])):
            seq = client.next_sequence_id
            client.next_sequence_id += 1
            entry = self._new_entry(client, seq)
            client.pending[seq] = entry
            self.checker.sent((client.topic, client.name, seq))
            fresh.append((seq, entry))
        self.send_entries(client, fresh)
        return True

    def send_entries(self, client: ProducerClient, entries: list[tuple[int, bytes]]) -> None:
        if not entries or client.conn is None:
            return
        sends = []
        for seq, entry in entries:
            client.in_flight.append(seq)
            sends.append((T(type=T.SEND, send=pb.CommandSend(producer_id=client.producer_id, sequence_id=seq,
                                                             num_messages=1)), entry))
        client.conn.send_run(sends)
        self.reads.read_all()

    def step_close_producer(self, client: ProducerClient) -> bool:
        if client.state != "ready":
            return False
        client.request_id += 1
        client.state = "closed"
        client.in_flight.clear()
        self.send(client, T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
            producer_id=client.producer_id, request_id=client.request_id)))
        return True

    # -- consumer steps --------------------------------------------------------------------------
    def _subscribe(self, client: ConsumerClient) -> None:
        client.conn = self._connection(client.address)
        client.state = "subscribing"
        client.request_id += 1
        self.checker.subscribing(client.topic, client.subscription, client.sub_type, client.key)
        body = pb.CommandSubscribe(topic=client.topic, subscription=client.subscription,
                                   subType=SUB_TYPES[client.sub_type], consumer_id=client.consumer_id,
                                   request_id=client.request_id, consumer_name=client.name,
                                   initialPosition=pb.CommandSubscribe.Earliest)
        self.send(client, T(type=T.SUBSCRIBE, subscribe=body))

    def step_receive(self, client: ConsumerClient) -> bool:
        if client.state != "ready" or not client.queue:
            return False
        count = self.rng.randint(1, len(client.queue))
        taken, client.queue = client.queue[:count], client.queue[count:]
        client.held.extend(taken)
        self.send(client, T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=client.consumer_id,
                                                              messagePermits=len(taken))))
        return True

    def _ids(self, messages: Sequence[Message]) -> list[pb.MessageIdData]:
        return [pb.MessageIdData(ledgerId=m.pos.ledger_id, entryId=m.pos.entry_id) for m in messages]

    def step_ack(self, client: ConsumerClient, everything: bool = False) -> bool:
        if client.state != "ready" or not client.held:
            return False
        picked = client.held if everything else self.rng.sample(client.held, self.rng.randint(1, len(client.held)))
        gone = {id(m) for m in picked}
        client.held = [m for m in client.held if id(m) not in gone]
        self.checker.acked(client.key, [m.pos for m in picked])
        self.send(client, T(type=T.ACK, ack=pb.CommandAck(consumer_id=client.consumer_id,
                                                           ack_type=pb.CommandAck.Individual,
                                                           message_id=self._ids(picked))))
        return True

    def step_ack_cumulative(self, client: ConsumerClient) -> bool:
        if client.state != "ready" or not client.held or client.sub_type not in (EXCLUSIVE, FAILOVER):
            return False
        upto = max(m.pos for m in client.held)
        client.held = [m for m in client.held if m.pos > upto]
        self.checker.acked_up_to(client.key, upto)
        self.send(client, T(type=T.ACK, ack=pb.CommandAck(
            consumer_id=client.consumer_id, ack_type=pb.CommandAck.Cumulative,
            message_id=[pb.MessageIdData(ledgerId=upto.ledger_id, entryId=upto.entry_id)])))
        return True

    def step_nack(self, client: ConsumerClient) -> bool:
        if client.state != "ready" or not (client.held or client.queue):
            return False
        body = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=client.consumer_id)
        if client.sub_type in (SHARED, KEY_SHARED) and client.held:
            picked = self.rng.sample(client.held, self.rng.randint(1, len(client.held)))
            gone = {id(m) for m in picked}
            client.held = [m for m in client.held if id(m) not in gone]
            self.checker.nacked(client.key, [m.pos for m in picked])
            body.message_ids.extend(self._ids(picked))
            self.send(client, T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))
            return True
        # everything back, as the official client does on these types: its queue too
        dropped = len(client.queue)
        client.queue.clear()
        client.held.clear()
        self.checker.nacked(client.key, None)
        self.send(client, T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))
        if dropped and client.state == "ready":
            self.send(client, T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=client.consumer_id,
                                                                  messagePermits=dropped)))
        return True

    def step_seek(self, client: ConsumerClient) -> bool:
        if client.state != "ready":
            return False
        client.request_id += 1
        body = pb.CommandSeek(consumer_id=client.consumer_id, request_id=client.request_id)
        seen = client.held + client.queue
        if seen and self.rng.random() < 0.7:
            target = self.rng.choice(seen).pos
            body.message_id.CopyFrom(pb.MessageIdData(ledgerId=target.ledger_id, entryId=target.entry_id))
            start: Position | None = target
        else:
            body.message_publish_time = 0
            start = None
        self.checker.seeked(client.topic, client.subscription, start)
        self.send(client, T(type=T.SEEK, seek=body))
        return True

    def step_unsubscribe(self, client: ConsumerClient) -> bool:
        if client.state != "ready" or client.unsubscribe_request is not None:
            return False
        client.request_id += 1
        client.unsubscribe_request = client.request_id
        self.send(client, T(type=T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(
            consumer_id=client.consumer_id, request_id=client.request_id)))
        if client.conn is not None and client.consumer_id not in client.conn.consumers:
            # the broker took it: this consumer is gone, and the subscription with it (a crash
            # before the deletion is durable may bring the subscription back: it then owes nothing)
            self.checker.detached(client.key)
            self.checker.unsubscribed(client.topic, client.subscription)
            client.state = "closed"
            client.queue.clear()
            client.held.clear()
        return True

    def step_close_consumer(self, client: ConsumerClient) -> bool:
        if client.state != "ready":
            return False
        client.request_id += 1
        self.consumer_gone(client)
        self.send(client, T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
            consumer_id=client.consumer_id, request_id=client.request_id)))
        return True

    def step_stats(self, client: ConsumerClient) -> bool:
        """CONSUMER_STATS and GET_LAST_MESSAGE_ID: answered, whatever the broker is doing."""
        if client.state != "ready":
            return False
        client.request_id += 2
        self.send(client, T(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(
            consumer_id=client.consumer_id, request_id=client.request_id - 1)))
        self.send(client, T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
            consumer_id=client.consumer_id, request_id=client.request_id)))
        return True

    def step_rejoin(self, client: ProducerClient | ConsumerClient) -> bool:
        if client.state != "closed":
            return False
        if isinstance(client, ProducerClient):
            self._create_producer(client)
        else:
            self._subscribe(client)
        return True

    # -- broker and storage steps ------------------------------------------------------------------
    def _topic_key(self, verb: str) -> str:
        """A topic with work of that kind waiting, if any (most schedule steps then do something)."""
        broker = self.broker
        ledgers = {name: broker.ledger_of(name) for name in self.topic_names}
        if verb == "write":
            ready = [n for n, ledger in ledgers.items() if ledger is not None and ledger.unwritten_from is not None]
        elif verb == "sync":
            ready = [n for n, ledger in ledgers.items() if ledger is not None and ledger.written() != ledger.synced()]
        else:
            ready = [n for n in self.topic_names if broker.sync_reports.get(n)]
        return self.rng.choice(ready or self.topic_names)

    def step_load(self) -> bool:
        if not self.broker.loads:
            return False
        self.broker.finish_load(self.rng.choice(sorted(self.broker.loads)))
        self.reads.read_all()
        return True

    def step_metadata(self) -> bool:
        done = self.broker.complete_metadata(self.rng.randint(1, 4))
        self.reads.read_all()
        return done > 0

    def step_write(self, fail: bool = False) -> bool:
        done = self.broker.write(self._topic_key("write"), fail)
        if done and fail:
            self.write_failures += 1
        self.reads.read_all()
        return done

    def step_sync(self, fail: bool = False) -> bool:
        done = self.broker.sync(self._topic_key("sync"), fail)
        if done and fail:
            self.sync_failures += 1
        self.reads.read_all()
        return done

    def step_report(self) -> bool:
        done = self.broker.deliver_reports(self._topic_key("report"), self.rng.randint(1, 2))
        self.reads.read_all()
        return done

    def step_tick(self, ms: int | None = None) -> bool:
        self.now += ms if ms is not None else self.rng.choice([1, 10, 100, 1000, 3000])
        self.broker.fire_timers()
        self.reads.read_all()
        return True

    def step_handover(self) -> bool:
        """A planned move of a topic to another broker over the same storage
        (server/cluster_membership.py): deliveries held until its consumers acknowledged
        what they hold or the drain's deadline passed, then the topic unloaded; its clients
        come back and it loads again from storage."""
        loaded = [topic for key, topic in sorted(self.broker.topics.items()) if key not in self.draining]
        if not loaded:
            return False
        topic = self.rng.choice(loaded)
        key = str(topic.name)
        drain = DeliveryDrain(topic, self.broker.core.timers, self.now + self.rng.choice([0, 30, 300]),
                              lambda drained: self.drained.append((topic, drained)))
        self.draining[key] = drain
        drain.start(self.now)
        self._finish_handovers()
        return True

    def _finish_handovers(self) -> None:
        while self.drained:
            topic, drained = self.drained.pop(0)
            self.draining.pop(str(topic.name), None)
            if self.broker.topics.get(str(topic.name)) is not topic:
                continue  # gone meanwhile (a failed sync unloaded it, a crash)
            self.broker.unload(topic)
            self.checker.handed_over(str(topic.name), drained)
            self.handovers += 1
            self.reads.read_all()

    def step_crash(self) -> bool:
        """Power cut: the broker and every connection die; a new broker opens what storage kept."""
        self.crashes += 1
        for name, kept in self.storage.ledgers.crash().items():
            self.checker.lost_from(name, Position(kept.ledger_id, kept.entry_id + 1) if kept is not None
                                   else Position(-1, -1))
        self.checker.broker_restarted()
        for client in self.clients:
            if isinstance(client, ConsumerClient):
                client.queue.clear()
                client.held.clear()
                client.unsubscribe_request = None
            if client.state != "gone":
                client.state = "closed"
            if isinstance(client, ProducerClient):
                client.in_flight.clear()
            client.conn = None
        self.connections.clear()
        self.written.clear()
        self.draining.clear()
        self.drained.clear()
        self.broker = SimBroker(self.storage, self.options.dedup_entries_interval)
        return True

    # -- schedules ----------------------------------------------------------------------------------
    def step(self) -> str:
        """One random step of the safety phase; its name."""
        weights = self.options.weights
        verb = self.rng.choices(list(weights), list(weights.values()))[0]
        if self.events is not None:
            self.events.append(f"{self.steps_done} {verb} (now {self.now})")
        applied = self._apply(verb)
        self._finish_handovers()
        self.trace.update(f"{verb}:{applied};".encode())
        return verb

    def _apply(self, verb: str) -> bool:
        producers, consumers = self.producers, self.consumers
        if verb == "send":
            return self.step_send(self._pick(producers, lambda p: p.state == "ready"))
        if verb == "close_producer":
            return self.step_close_producer(self._pick(producers, lambda p: p.state == "ready"))
        if verb == "rejoin":
            return self.step_rejoin(self._pick(self.clients, lambda c: c.state == "closed"))
        if verb == "disconnect":
            client = self.rng.choice(self.clients)
            self.drop_connection(client)
            self.reads.read_all()
            return True
        consumer_steps = {"receive": self.step_receive, "ack": self.step_ack, "nack": self.step_nack,
                          "ack_cumulative": self.step_ack_cumulative, "seek": self.step_seek,
                          "unsubscribe": self.step_unsubscribe, "close_consumer": self.step_close_consumer,
                          "stats": self.step_stats}
        if verb in consumer_steps:
            wants = {"receive": lambda c: c.queue, "ack": lambda c: c.held, "nack": lambda c: c.held or c.queue,
                     "ack_cumulative": lambda c: c.held and c.sub_type in (EXCLUSIVE, FAILOVER)}
            usable = wants.get(verb, lambda c: True)
            return consumer_steps[verb](self._pick(consumers, lambda c: c.state == "ready" and bool(usable(c))))
        broker_steps = {"load": self.step_load, "metadata": self.step_metadata, "write": self.step_write,
                        "sync": self.step_sync, "report": self.step_report, "tick": self.step_tick,
                        "crash": self.step_crash, "handover": self.step_handover}
        if verb in broker_steps:
            return broker_steps[verb]()
        if verb == "write_fail":
            return self.step_write(fail=True)
        if verb == "sync_fail":
            return self.step_sync(fail=True)
        raise ValueError(f"unknown step {verb}")

    def _pick(self, clients: Sequence[C], usable: Callable[[C], bool]) -> C:
        """A client the step applies to, if any (else any client: the step then does nothing)."""
        ready = [c for c in clients if usable(c)]
        return self.rng.choice(ready or clients)

    def settle(self) -> None:
        """One round of the liveness phase: every client connected, every piece of storage
        work done, time moved on, every consumer takes and acknowledges what it has."""
        for client in self.clients:
            self.step_rejoin(client)
        while self.broker.loads:
            self.broker.finish_load(sorted(self.broker.loads)[0])
            self.reads.read_all()
        for name in self.topic_names:
            self.broker.write(name)
            self.broker.sync(name)
            self.broker.deliver_reports(name)
            self.reads.read_all()
        self.broker.complete_metadata(len(self.broker.metadata_queue))
        self.reads.read_all()
        for consumer in self.consumers:
            while self.step_receive(consumer):
                pass
            self.step_ack(consumer, everything=True)
        self.step_tick(500)
        self._finish_handovers()

    def quiet(self) -> bool:
        return not self.broker.loads and not self.broker.metadata_queue \
            and all(not p.pending and p.state == "ready" for p in self.producers) \
            and all(not c.queue and not c.held for c in self.consumers) \
            and not self.checker.owed()

    def run(self) -> None:
        for client in self.clients:  # every client starts by connecting; the rest is the schedule's
            self.step_rejoin(client)
        for _ in range(self.options.steps):
            self.steps_done += 1
            self.step()
        for _ in range(300):  # a Key_Shared subscription with maxUnacked 3 drains a few entries a round
            self.settle()
            if self.quiet():
                break
        stuck = [p.name for p in self.producers if p.pending]
        if stuck:
            raise CommandViolation(f"sends never receipted after faults stopped: {stuck}")
        self.checker.check_end()


@dataclass
class CommandResult:
    seed: int
    ok: bool
    violation: str | None
    steps: int
    deliveries: int
    receipted: int
    crashes: int
    write_failures: int
    sync_failures: int
    digest: str
    handovers: int = 0


def run(seed: int, steps: int | None = None) -> CommandResult:
    options = CommandOptions.from_seed(seed, steps)
    world = CommandWorld(options)
    violation = None
    try:
        world.run()
    except CommandViolation as exc:
        violation = f"step {world.steps_done}: {exc}"
    return CommandResult(seed, violation is None, violation, world.steps_done, world.checker.deliveries,
                         len(world.checker.receipted), world.crashes, world.write_failures, world.sync_failures,
                         world.trace.hexdigest(), world.handovers)


def _trace(seed: int, steps: int | None) -> int:
    world = CommandWorld(CommandOptions.from_seed(seed, steps))
    world.events = []
    try:
        world.run()
    except CommandViolation as exc:
        print("\n".join(world.events))
        print(f"VIOLATION at step {world.steps_done}: {exc}")
        return 1
    print("\n".join(world.events))
    print("ok")
    return 0


def _results(first: int, count: int, steps: int | None, jobs: int) -> Iterator[CommandResult]:
    seeds = range(first, first + count)
    if jobs <= 1:
        yield from (run(seed, steps) for seed in seeds)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(run, seeds, [steps] * count, chunksize=64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.testing.sim.command_world", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="first seed (random when omitted)")
    parser.add_argument("--schedules", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--steps", type=int, default=None, help="safety steps per schedule (default: from seed)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true", help="print every step and frame of one schedule")
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.jobs < 1 or (args.steps is not None and args.steps < 0):
        parser.error("--schedules and --jobs must be at least 1, --steps at least 0")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}", flush=True)
    if args.trace:
        return _trace(seed, args.steps)
    started = time.monotonic()
    totals = {"deliveries": 0, "receipted": 0, "crashes": 0, "write_failures": 0, "sync_failures": 0}
    failures = 0
    for result in _results(seed, args.schedules, args.steps, args.jobs):
        for key in totals:
            totals[key] += getattr(result, key)
        if not result.ok:
            failures += 1
            print(f"seed {result.seed}: VIOLATION at {result.violation}\n"
                  f"# replay: python -m magnetar.testing.sim.command_world --seed {result.seed}", flush=True)
    print(json.dumps({"first_seed": seed, "schedules": args.schedules, "violations": failures, **totals,
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
