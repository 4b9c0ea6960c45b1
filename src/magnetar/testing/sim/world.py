"""The simulated world: the real core (Topic, Subscription, the dispatcher of the
subscription's type, in-memory ledger) and a model of the clients around it.

Each simulated consumer is what the official client does, reduced to its effect on the
broker: a receiver queue filled by the broker, an application that takes entries from
it and hands permits back as it goes (half a queue at a time), acknowledges, nacks or
asks for everything again. ``apply`` executes one schedule step; every delivery and
every acknowledgement is reported to the checker as it happens. Readers (``readers``)
take their own non-durable subscriptions on the same topic.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.broker_core import BrokerCore
from magnetar.core.delayed.delayed_delivery import DelayedDelivery
from magnetar.core.dispatchers.base import Dispatcher
from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.core.errors import BrokerError
from magnetar.core.key_shared.draining_hashes_tracker import DrainingHashesTracker
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import publish
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.testing.sim.actions import Action, parse_indexes, parse_ranges
from magnetar.testing.sim.checkers import ContractChecker, Violation
from magnetar.testing.sim.options import EXCLUSIVE, KEY_SHARED, SUB_TYPES, SimOptions
from magnetar.testing.sim.reader_steps import ReaderSteps
from magnetar.testing.sim.readers import SimReader, start_after
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

SUBSCRIPTION = "sub"
KEY_SHARED_AUTO_SPLIT, KEY_SHARED_STICKY = 0, 1


@dataclass(slots=True)
class Delivery:
    pos: Position
    messages: int
    ack_set: list[int] | None
    redelivery_count: int


@dataclass(eq=False)
class SimClient:
    """One consumer as its application sees it."""

    name: str
    queue_size: int
    ranges: list[tuple[int, int]] | None
    core: Consumer | None = None
    inbox: deque[Delivery] = field(default_factory=deque)
    #: received and not yet acknowledged or sent back, in the order received
    received: list[Delivery] = field(default_factory=list)
    #: messages taken from the queue since the last FLOW
    consumed: int = 0
    behavior: str = "normal"

    def sink_send(self, world: World, pos: Position, entry: bytes, redelivery_count: int,
                  ack_set: list[int] | None) -> None:
        if self.core is None:
            raise Violation(f"{pos} sent to {self.name} after the broker closed it")
        messages = world.published_messages(pos, ack_set)
        if world.events is not None:
            key = world.checker.entries[pos].key if pos in world.checker.entries else "?"
            world.events.append(f"    {pos} ({key}) -> {self.name}" + (f" redelivery {redelivery_count}"
                                                                       if redelivery_count else ""))
        world.checker.delivered(self.name, pos, messages)
        world.trace.update(f"{pos}>{self.name}:{redelivery_count};".encode())
        if world.entries.get(pos) != entry:
            raise Violation(f"{pos} sent to {self.name} with bytes other than those published")
        self.inbox.append(Delivery(pos, messages, ack_set, redelivery_count))


class _Sink:
    def __init__(self, world: World, client: SimClient) -> None:
        self.world = world
        self.client = client

    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        self.client.sink_send(self.world, pos, entry, redelivery_count, ack_set)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.world.checker.active_changed(self.client.name, is_active)
        if self.world.events is not None:
            self.world.events.append(f"    {self.client.name} {'active' if is_active else 'inactive'}")

    def reached_end_of_topic(self, consumer_id: int) -> None:
        raise Violation(f"{self.client.name} told of the end of a topic nobody terminated")

    def close_consumer(self, consumer_id: int) -> None:
        if self.world.closed_by_broker is None:
            raise Violation(f"the broker closed {self.client.name} unasked")
        self.world.closed_by_broker.append(self.client)
        self.world.forget_consumer(self.client)


class _ProducerSink:
    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int, pos: Position) -> None:
        pass

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        pass

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        raise Violation(f"publish {sequence_id} failed: {message}")

    def close_producer(self, producer_id: int) -> None:
        pass

    def producer_ready(self, producer: Producer) -> None:
        pass


def broker_config(options: SimOptions) -> BrokerConfig:
    return BrokerConfig(
        subscriptionKeySharedUseConsistentHashing=options.selector != "auto-split",
        subscriptionKeySharedConsistentHashingReplicaPoints=options.replica_points,
        subscriptionKeySharedUseClassicPersistentImplementation=options.classic,
        keySharedUnblockingIntervalMs=options.unblocking_interval_ms,
        keySharedLookAheadMsgInReplayThresholdPerConsumer=options.look_ahead_per_consumer,
        keySharedLookAheadMsgInReplayThresholdPerSubscription=options.look_ahead_per_subscription,
        maxUnackedMessagesPerConsumer=options.max_unacked_per_consumer,
        maxUnackedMessagesPerSubscription=options.max_unacked_per_subscription,
        delayedDeliveryTickTimeMillis=options.delayed_tick_ms,
    )


class World:
    def __init__(self, options: SimOptions, checker: ContractChecker) -> None:
        self.options = options
        self.checker = checker
        self.now_ms = 1_000
        self.config = broker_config(options)
        self.ledger = MemoryLedger("sim", config=LedgerConfig(max_entries_per_ledger=options.entries_per_ledger),
                                   clock_ms=lambda: self.now_ms)
        #: the broker's core: its one timer drives unblocking and delayed ticks as in the broker
        self.core = BrokerCore(self.config)
        self.topic = Topic(TopicName.parse("persistent://public/default/sim"), self.ledger, self.config,
                           dispatcher_factory=self.core.dispatcher_factory)
        self.core.adopt(self.topic)
        self.core.delayed_tick.start(self.now_ms)
        if options.delayed_probability > 0:
            self.topic.delayed = DelayedDelivery(self.config)
        self.producer = Producer(1, "p", _ProducerSink())
        self.topic.add_producer(self.producer)
        self.sequence_id = 0
        self.entries: dict[Position, bytes] = {}
        #: every published position, in publish order
        self.order: list[Position] = []
        self.readers: dict[str, SimReader] = {}
        #: every reader opened, closed or not (for the figures)
        self.readers_seen: list[SimReader] = []
        self.reader_steps = ReaderSteps(self)
        #: consumers the broker closed while the world expected it (a seek), else None
        self.closed_by_broker: list[SimClient] | None = None
        self.messages: dict[Position, int] = {}
        self.clients: dict[str, SimClient] = {}
        self.next_consumer_id = 1
        self.refused = 0
        self.published_total = 0
        self.last_published: Position | None = None
        #: the name a client's consumer gives the broker, when not the client's own (scenarios)
        self.consumer_names: dict[str, str] = {}
        #: every delivery, in order: two runs of one seed must end with the same digest
        self.trace = hashlib.sha256()
        #: when a list, deliveries are written here as they happen (``--trace``)
        self.events: list[str] | None = None

    # -- views ------------------------------------------------------------------
    @property
    def sub(self) -> Subscription | None:
        return self.topic.subscriptions.get(SUBSCRIPTION)

    @property
    def dispatcher(self) -> Dispatcher | None:
        sub = self.sub
        return sub.dispatcher if sub is not None else None

    def published_messages(self, pos: Position, ack_set: list[int] | None) -> int:
        total = self.messages[pos]
        if not ack_set:
            return total
        return sum(1 for i in range(total) if ack_set[i // 64] >> (i % 64) & 1)

    def connected(self) -> list[SimClient]:
        return [c for c in self.clients.values() if c.core is not None]

    # -- steps ------------------------------------------------------------------
    def apply(self, action: Action) -> bool:
        """Run one step; False if it did not apply (a trimmed schedule may name what is gone)."""
        verb = action.verb.replace("-", "_")
        if verb.startswith("reader_"):
            handler = getattr(self.reader_steps, verb.removeprefix("reader_"))
        else:
            handler = getattr(self, "_" + verb)
        applied = bool(handler(*action.args))
        self._fire_timers()
        return applied

    def _client(self, name: str) -> SimClient | None:
        client = self.clients.get(name)
        return client if client is not None and client.core is not None else None

    def _publish(self, key: str, count: str, delay_ms: str | None = None) -> bool:
        n = int(count)
        self.sequence_id += 1
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=self.sequence_id, publish_time=self.now_ms)
        if delay_ms is not None:
            metadata.deliver_at_time = self.now_ms + int(delay_ms)
        if key == "-":
            checker_key = f"p-{self.sequence_id}"
        elif key.endswith("@o"):
            checker_key = key[:-2]
            metadata.ordering_key = checker_key.encode()
            metadata.partition_key = f"other-{self.sequence_id % 7}"
        else:
            checker_key = key
            metadata.partition_key = key
        if n > 1:
            metadata.num_messages_in_batch = n
        entry = make_entry(metadata, b"x" * 8)
        # the broker's publish path for a read's worth of sends (here, one)
        _, (pos,) = publish.publish(self.topic, self.producer, [(self.sequence_id, self.sequence_id, n, entry)],
                                    self.now_ms)
        self.entries[pos] = entry
        self.order.append(pos)
        self.messages[pos] = n
        self.last_published = pos
        self.published_total += 1
        self.checker.published(pos, checker_key, n, delayed=delay_ms is not None)
        return True

    def _persist(self) -> bool:
        self.ledger.flush()
        upto = self.ledger.sync()
        if upto is not None:
            self.topic.on_persisted(upto, self.now_ms)
        return True

    def _join(self, name: str, queue: str, ranges: str | None = None) -> bool:
        old = self.clients.get(name)
        if old is not None and old.core is not None:
            return False
        if self.options.sub_type == EXCLUSIVE and self.connected():
            return False
        client = SimClient(name, int(queue), parse_ranges(ranges) if ranges else None)
        core = self._new_consumer(client, self._meta(client.ranges) if self.key_shared else None)
        self.checker.consumer_joined(name, core.consumer_name)
        self.clients[name] = client
        client.core = core
        self.topic.subscribe(SUBSCRIPTION, core, self.now_ms, initial_earliest=True)
        self._flow(name, str(client.queue_size))
        return True

    @property
    def key_shared(self) -> bool:
        return self.options.sub_type == KEY_SHARED

    def _new_consumer(self, client: SimClient, meta: pb.KeySharedMeta | None, sub_type: str | None = None) -> Consumer:
        core = Consumer(self.next_consumer_id, self.consumer_names.get(client.name, client.name),
                        _Sink(self, client), sub_type=sub_type or self.options.sub_type, key_shared_meta=meta)
        self.next_consumer_id += 1
        return core

    def _meta(self, ranges: list[tuple[int, int]] | None, mode: int | None = None,
              out_of_order: bool | None = None) -> pb.KeySharedMeta:
        sticky = ranges is not None
        meta = pb.KeySharedMeta(
            allowOutOfOrderDelivery=self.options.allow_out_of_order if out_of_order is None else out_of_order)
        meta.keySharedMode = mode if mode is not None else KEY_SHARED_STICKY if sticky else KEY_SHARED_AUTO_SPLIT  # type: ignore[assignment]
        for start, end in ranges or ():
            meta.hashRanges.add(start=start, end=end)
        return meta

    def _join_bad(self, name: str, queue: str, kind: str, ranges: str | None = None) -> bool:
        """A subscribe that must be refused and must change nothing."""
        if name in self.clients and self.clients[name].core is not None:
            return False
        sticky = self.options.sticky
        if kind in ("mode", "ooo", "exclusive", "type") and not self.connected():
            return False
        if kind in ("mode", "ooo", "conflict", "invalid") and not self.key_shared:
            return False
        sub_type = None
        meta: pb.KeySharedMeta | None
        if kind == "exclusive":
            if self.options.sub_type != EXCLUSIVE:
                return False
            meta = None
        elif kind == "type":
            sub_type = _another_type(self.options.sub_type)
            meta = self._meta(None) if sub_type == KEY_SHARED else None
        elif kind == "mode":
            other_mode = KEY_SHARED_AUTO_SPLIT if sticky else KEY_SHARED_STICKY
            meta = self._meta(None if sticky else [(1, 10)], mode=other_mode)
        elif kind == "ooo":
            flipped = not self.options.allow_out_of_order
            meta = self._meta(parse_ranges(ranges) if ranges else None, out_of_order=flipped)
        else:
            meta = self._meta(parse_ranges(ranges) if ranges else [])
        core = self._new_consumer(SimClient(name, int(queue), None), meta, sub_type)
        before = self._state_fingerprint()
        try:
            self.topic.subscribe(SUBSCRIPTION, core, self.now_ms, initial_earliest=True)
        except BrokerError:
            self.refused += 1
        else:
            raise Violation(f"subscribe {name} ({kind}) should have been refused")
        if self._state_fingerprint() != before:
            raise Violation(f"the refused subscribe of {name} ({kind}) changed the subscription")
        return True

    def _state_fingerprint(self) -> tuple[Any, ...]:
        sub = self.sub
        consumers = tuple(id(c) for c in sub.consumers) if sub is not None else ()
        return consumers, self.checker.deliveries

    def _close(self, client: SimClient) -> None:
        core = client.core
        assert core is not None and self.sub is not None
        self.forget_consumer(client)
        self.topic.remove_consumer(self.sub, core, self.now_ms)

    def forget_consumer(self, client: SimClient) -> None:
        """The client's consumer is gone (it closed, or the broker closed it): what it held
        and had queued goes back."""
        client.core = None
        self.checker.consumer_left(client.name)
        client.inbox.clear()
        client.received.clear()
        client.consumed = 0

    def _leave(self, name: str) -> bool:
        client = self._client(name)
        if client is None:
            return False
        self._receive(name, str(len(client.inbox)))
        self._ack(name, ",".join(str(i) for i in range(len(client.received))))
        self._close(client)
        return True

    def _crash(self, name: str) -> bool:
        client = self._client(name)
        if client is None:
            return False
        self._close(client)
        return True

    def _reconnect(self, name: str) -> bool:
        """The connection drops and the client subscribes again; the application keeps what it
        received and may still acknowledge it (the broker takes acks from any consumer)."""
        client = self._client(name)
        if client is None:
            return False
        kept = client.received[:]
        self._close(client)
        ranges = ",".join(f"{a}:{b}" for a, b in client.ranges) if client.ranges else None
        joined = self._join(name, str(client.queue_size), ranges)
        self.clients[name].received = kept
        return joined

    def _receive(self, name: str, count: str) -> bool:
        client = self._client(name)
        if client is None or client.core is None:
            return False
        for _ in range(min(int(count), len(client.inbox))):
            delivery = client.inbox.popleft()
            client.received.append(delivery)
            client.consumed += delivery.messages
        threshold = max(1, client.queue_size // 2)
        if client.consumed >= threshold:
            permits, client.consumed = client.consumed, 0
            self._flow(name, str(permits))
        return True

    def _picked(self, client: SimClient, indexes: str) -> list[Delivery]:
        return [client.received[i] for i in sorted(set(parse_indexes(indexes))) if i < len(client.received)]

    def _take(self, client: SimClient, indexes: str, tell: Callable[[Position], None]) -> list[Delivery]:
        """The received deliveries ``indexes`` names, no longer outstanding; ``tell`` the
        checker of each."""
        picked = self._picked(client, indexes)
        _drop(client.received, picked)
        for d in picked:
            tell(d.pos)
        return picked

    def _ack(self, name: str, indexes: str = "") -> bool:
        client = self._client(name)
        if client is None or self.sub is None:
            return False
        picked = self._take(client, indexes, lambda pos: self.checker.acked(name, pos))
        if not picked:
            return False
        assert client.core is not None
        self.sub.acknowledge(client.core, False, [(d.pos, None) for d in picked], self.now_ms)
        return True

    def _ack_part(self, name: str, index: str, batch_index: str) -> bool:
        client = self._client(name)
        if client is None or self.sub is None or int(index) >= len(client.received):
            return False
        d = client.received[int(index)]
        total = self.messages[d.pos]
        remaining = [i for i in range(total) if not d.ack_set or d.ack_set[i // 64] >> (i % 64) & 1]
        bi = int(batch_index)
        if total < 2 or bi not in remaining:
            return False
        left = [i for i in remaining if i != bi]
        words = [0] * ((total + 63) // 64)
        for i in left:
            words[i // 64] |= 1 << (i % 64)
        d.ack_set = words if left else None
        self.checker.acked(name, d.pos, [bi])
        if not left:
            client.received.remove(d)
        assert client.core is not None
        self.sub.acknowledge(client.core, False, [(d.pos, words if left else None)], self.now_ms)
        return True

    def _ack_cum(self, name: str, index: str) -> bool:
        """Cumulative: every entry up to the received one, wherever it is outstanding."""
        client = self._client(name)
        if client is None or self.sub is None or not self.options.single_active or int(index) >= len(client.received):
            return False
        upto = client.received[int(index)].pos
        client.received[:] = [d for d in client.received if d.pos > upto]
        self.checker.acked_up_to(name, upto)
        assert client.core is not None
        self.sub.acknowledge(client.core, True, [(upto, None)], self.now_ms)
        return True

    def _nack(self, name: str, indexes: str) -> bool:
        client = self._client(name)
        if client is None or self.sub is None:
            return False
        if self.options.single_active:
            # the official client cannot send single messages back on these types: it asks for all
            return self._nack_all(name)
        picked = self._take(client, indexes, lambda pos: self.checker.sent_back(name, pos))
        if not picked:
            return False
        assert client.core is not None
        self.sub.redeliver(client.core, [d.pos for d in picked], self.now_ms)
        return True

    def _nack_all(self, name: str) -> bool:
        client = self._client(name)
        if client is None or self.sub is None:
            return False
        dropped = sum(d.messages for d in client.inbox)
        for d in [*client.received, *client.inbox]:
            self.checker.sent_back(name, d.pos)
        client.received.clear()
        client.inbox.clear()
        assert client.core is not None
        self.sub.redeliver(client.core, None, self.now_ms)
        if dropped:
            self._flow(name, str(dropped))
        return True

    def _flow(self, name: str, count: str) -> bool:
        client = self._client(name)
        if client is None or self.sub is None or int(count) <= 0:
            return False
        self.checker.flow(name, int(count))
        assert client.core is not None
        self.sub.dispatcher.on_flow(client.core, int(count), self.now_ms)
        return True

    def _behave(self, name: str, behavior: str) -> bool:
        client = self._client(name)
        if client is None:
            return False
        client.behavior = behavior
        return True

    def _expire(self, upto: str) -> bool:
        """Message TTL, as the broker's expire_messages does it: a cumulative ack of the cursor alone."""
        sub, target = self.sub, Position.parse(upto)
        if sub is None or target <= sub.cursor.mark_delete:
            return False
        for pos, entry in self.checker.entries.items():
            if pos <= target and not entry.acked:
                self.checker.acked(entry.holder or "ttl", pos)
        sub.cursor.ack_cumulative(target)
        return True

    def _seek(self, target: str) -> bool:
        """CommandSeek (or the admin's reset-cursor): the broker closes every consumer, the
        clients drop what they hold and subscribe again, and reading starts over."""
        sub = self.sub
        if sub is None:
            return False
        start = None if target == "earliest" else Position.parse(target)
        mark_delete = start_after(start, self.topic.last_readable())
        self.closed_by_broker = []
        try:
            sub.reset_cursor(mark_delete, self.now_ms)
            closed = self.closed_by_broker
        finally:
            self.closed_by_broker = None
        if self.connected():
            raise Violation(f"a seek left {[c.name for c in self.connected()]} connected")
        self.checker.seek(mark_delete)
        for client in closed:
            ranges = ",".join(f"{a}:{b}" for a, b in client.ranges) if client.ranges else None
            self._join(client.name, str(client.queue_size), ranges)
        return True

    def note(self, text: str) -> None:
        self.trace.update(text.encode())
        if self.events is not None:
            self.events.append("    " + text)

    def _tick(self, ms: str) -> bool:
        self.now_ms += int(ms)
        return True

    def _fire_timers(self) -> None:
        """The broker's one timer, as the shell runs it: whatever came due by now."""
        due = self.core.next_deadline_ms()
        if due is not None and due <= self.now_ms:
            self.core.on_timer(self.now_ms)
            failures, self.core.timers.failures = self.core.timers.failures, []
            if failures:
                raise failures[0][1]

    def progress(self) -> tuple[int, int, int]:
        """Deliveries, entries still unacknowledged, reader deliveries: what liveness watches move."""
        return (self.checker.deliveries, len(self.checker.unacked()),
                sum(r.received for r in self.readers.values()))

    def next_deadline_ms(self) -> int | None:
        """When the broker's timer rings next (unblocking, delayed tick), if it is armed."""
        return self.core.next_deadline_ms()

    def drained(self) -> bool:
        """Everything published was acknowledged and the dispatcher holds nothing back (an
        acknowledged entry may wait in the replay queue until the next round prunes it)."""
        dispatcher = self.dispatcher
        last = self.topic.last_readable()
        return not self.checker.unacked() and not replay_size(dispatcher) \
            and draining_hashes(dispatcher) is None \
            and not any(r.missing(last) or r.inbox for r in self.readers.values())


def replay_size(dispatcher: Dispatcher | None) -> int:
    """Entries a Shared or Key_Shared dispatcher holds for redelivery."""
    return len(dispatcher.replay) if isinstance(dispatcher, MultipleConsumersDispatcher) else 0


def draining_hashes(dispatcher: Dispatcher | None) -> DrainingHashesTracker[Consumer] | None:
    """A PIP-379 Key_Shared dispatcher's draining hashes, when any drain."""
    if isinstance(dispatcher, KeySharedDispatcher) and len(dispatcher.tracker):
        return dispatcher.tracker
    return None


def _another_type(sub_type: str) -> str:
    """A type other than the subscription's, for a subscribe that must be refused."""
    return SUB_TYPES[(SUB_TYPES.index(sub_type) + 1) % len(SUB_TYPES)]


def _drop(received: list[Delivery], picked: list[Delivery]) -> None:
    """Remove ``picked`` from ``received`` (by identity, in one pass)."""
    gone = {id(d) for d in picked}
    received[:] = [d for d in received if id(d) not in gone]
