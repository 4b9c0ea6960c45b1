"""A consumer attached to a subscription: permits, pending acks, and its statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.core.positions import Position
from magnetar.core.sinks import ConsumerSink
from magnetar.core.stats import RateCounter
from magnetar.wire import pulsar_api_pb2 as pb


@dataclass(eq=False)
class PendingEntry:
    messages: int
    sticky_hash: int = 0


@dataclass(eq=False)
class Consumer:
    consumer_id: int
    consumer_name: str
    sink: ConsumerSink
    sub_type: str = "Exclusive"
    priority_level: int = 0
    address: str = ""
    client_version: str = ""
    connected_since: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    key_shared_meta: pb.KeySharedMeta | None = None
    #: the schema type it subscribed with (Pulsar's name); AUTO_CONSUME ones do not hold a topic's schema
    schema_type: str = "NONE"
    permits: int = 0
    #: entries delivered and not yet acknowledged, in delivery order
    pending: dict[Position, PendingEntry] = field(default_factory=dict)
    unacked_messages: int = 0
    blocked_on_unacked: bool = False
    #: the connection's outgoing buffer is above its high-water mark: nothing more is sent
    #: until it drains, whatever the permits (netty's channel writability in Pulsar)
    write_paused: bool = False
    #: a dispatch rate limit of its subscription or topic is spent until the bucket refills
    rate_paused: bool = False
    #: its topic is moving to another broker: nothing more is sent, so what it holds can be
    #: acknowledged before it is closed (:mod:`magnetar.core.topics.handover`)
    handed_over: bool = False
    #: told that its terminated topic has nothing more (REACHED_END_OF_TOPIC), once
    told_end_of_topic: bool = False
    msg_out: RateCounter = field(default_factory=RateCounter)
    redeliver: RateCounter = field(default_factory=RateCounter)
    acks: RateCounter = field(default_factory=RateCounter)
    #: told of every pending entry that leaves (acked, redelivered, consumer closed);
    #: Key_Shared uses it to release draining hashes
    on_pending_removed: Callable[[Consumer, PendingEntry, bool], None] | None = None
    #: whether ``pending`` is in position order (deliveries of a tailing consumer are), so a
    #: cumulative ack stops at the first entry past it instead of scanning every pending one
    _pending_in_order: bool = True

    def __hash__(self) -> int:
        return id(self)

    def can_take(self) -> bool:
        """Whether an entry may be sent to this consumer now."""
        return (self.permits > 0 and not self.blocked_on_unacked and not self.write_paused and not self.rate_paused
                and not self.handed_over)

    def deliver(self, pos: Position, partition: int, entry: bytes, messages: int,
                redelivery_count: int, ack_set: list[int] | None, now_ms: int, sticky_hash: int = 0) -> None:
        self.permits -= messages
        pending = self.pending
        if pending and self._pending_in_order and pos <= next(reversed(pending)):
            self._pending_in_order = False
        pending[pos] = PendingEntry(messages, sticky_hash)
        self.unacked_messages += messages
        self.msg_out.add(now_ms, messages, len(entry))
        self.sink.send_message(self.consumer_id, pos, partition, entry, redelivery_count, ack_set)

    def remove_pending(self, pos: Position) -> PendingEntry | None:
        pending = self.pending.pop(pos, None)
        if pending is not None:
            self.unacked_messages -= pending.messages
            if self.on_pending_removed is not None:
                self.on_pending_removed(self, pending, False)
        return pending

    def remove_pending_up_to(self, pos: Position) -> list[Position]:
        if self._pending_in_order:
            done = []
            for p in self.pending:
                if p > pos:
                    break
                done.append(p)
        else:
            done = [p for p in self.pending if p <= pos]
        for p in done:
            self.remove_pending(p)
        if not self.pending:
            self._pending_in_order = True
        return done

    def take_all_pending(self) -> dict[Position, PendingEntry]:
        pending, self.pending = self.pending, {}
        self._pending_in_order = True
        self.unacked_messages = 0
        if self.on_pending_removed is not None:
            for entry in pending.values():
                self.on_pending_removed(self, entry, True)
        return pending
