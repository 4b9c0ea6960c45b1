"""The promises of Pulsar the broker-wide simulation holds the broker to, judged from what
clients and storage see (never from the broker's own bookkeeping, except to read the
cursor a restart restored, which must not run ahead of what applications acknowledged).

Checked as they happen:

* an entry is delivered only with the bytes that were appended at its position, only to
  a connected consumer with permits left (the client counts them), never while another
  consumer of the subscription holds it, and never again after it was acknowledged
  (until a restart or a seek brings it back);
* Exclusive and Failover: one active consumer: deliveries go only to the consumer the
  rule elects (the only one; Failover: the first by name, on a partition the one at
  ``partition % consumers``), and in subscription order (every earlier unacknowledged
  entry is outstanding at that consumer);
* Key_Shared: a key is outstanding at one consumer at most, and when an entry of a key
  goes out, every earlier entry of that key is acknowledged or outstanding at the same
  consumer (entries the application sent back, and delayed ones, are exempt from order);
* a message with a delivery time never goes out before it on Shared and Key_Shared (not
  more than one tick before it when the broker is not strict);
* deduplication: a deduplicating topic never stores one producer's sequence id twice;
* a restart's cursors acknowledge nothing no application acknowledged (or a seek skipped);
* (by the client model) an acknowledgement of a delivered entry is never refused, a
  second consumer on an Exclusive subscription always is.

Checked at the end, once faults stopped and everything drained: every receipted
message is stored, and was delivered to every subscription (a subscription starts at the
earliest message; a seek past a message excuses it), and every subscription's backlog
is empty.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from magnetar.core.positions import BEFORE_START, Position

EXCLUSIVE, FAILOVER, SHARED, KEY_SHARED = "Exclusive", "Failover", "Shared", "Key_Shared"


class BrokerViolation(AssertionError):
    """A promise broke; the message says which, where and why."""


@dataclass(frozen=True, slots=True)
class Msg:
    """What identifies a stored message: its producer and sequence id, its key and delivery time."""

    producer: str
    sequence_id: int
    key: str
    deliver_at: int | None = None


@dataclass
class SubState:
    topic: str
    name: str
    sub_type: str
    partition: int
    #: connected consumers (their names; the simulation names them uniquely)
    consumers: dict[str, set[Position]] = field(default_factory=dict)
    holder: dict[Position, str] = field(default_factory=dict)
    acked: set[Position] = field(default_factory=set)
    acked_upto: Position = BEFORE_START
    #: sent back by the application and not delivered since (exempt from order)
    sent_back: set[Position] = field(default_factory=set)
    #: delivered since the last seek back past them
    delivered: set[Position] = field(default_factory=set)
    #: the last seek's mark-delete position: what lies at or before it may be skipped
    seek_mark: Position = BEFORE_START
    #: everything any application ever acknowledged, and the furthest cumulative ack or seek
    ever_acked: set[Position] = field(default_factory=set)
    ever_skipped_upto: Position = BEFORE_START

    def is_acked(self, pos: Position) -> bool:
        return pos <= self.acked_upto or pos in self.acked

    def release(self, consumer: str, pos: Position) -> None:
        held = self.consumers.get(consumer)
        if held is not None:
            held.discard(pos)
        if self.holder.get(pos) == consumer:
            del self.holder[pos]


@dataclass
class TopicState:
    name: str
    dedup: bool
    entries: dict[Position, Msg] = field(default_factory=dict)
    #: the entries' positions in order, all and by key
    order: list[Position] = field(default_factory=list)
    by_key: dict[str, list[Position]] = field(default_factory=dict)
    #: where each (producer, sequence id) is stored
    where: dict[tuple[str, int], list[Position]] = field(default_factory=dict)
    receipted: set[tuple[str, int]] = field(default_factory=set)
    subs: dict[str, SubState] = field(default_factory=dict)

    def add(self, pos: Position, msg: Msg) -> None:
        """Store an entry; appends land after every entry the ledger holds."""
        if self.order and pos <= self.order[-1]:
            raise BrokerViolation(f"{self.name}: {pos} appended at or before {self.order[-1]}, which the ledger holds")
        self.entries[pos] = msg
        self.order.append(pos)
        self.by_key.setdefault(msg.key, []).append(pos)
        self.where.setdefault((msg.producer, msg.sequence_id), []).append(pos)

    def reset(self) -> None:
        self.entries, self.order, self.by_key, self.where = {}, [], {}, {}


class BrokerChecker:
    def __init__(self, delayed_slack_ms: int = 0) -> None:
        self.topics: dict[str, TopicState] = {}
        #: how early a delayed message may leave (one tick when the tracker is not strict)
        self.delayed_slack_ms = delayed_slack_ms
        self.deliveries = 0
        self.receipts = 0
        self.acks = 0
        self.delayed_delivered = 0
        self.checks = {"deliveries_checked": 0, "key_order_checks": 0, "subscription_order_checks": 0,
                       "restored_cursors_checked": 0}

    # -- storage ----------------------------------------------------------------------
    def add_topic(self, name: str, dedup: bool) -> None:
        self.topics[name] = TopicState(name, dedup)

    def appended(self, topic: str, pos: Position, msg: Msg) -> None:
        t = self.topics[topic]
        twice = t.where.get((msg.producer, msg.sequence_id))
        if t.dedup and twice:
            raise BrokerViolation(f"{topic}: {msg.producer} sequence id {msg.sequence_id} stored at {twice[0]} "
                                  f"and again at {pos} on a deduplicating topic")
        t.add(pos, msg)

    def stored(self, topic: str, entries: dict[Position, Msg]) -> None:
        """What the ledger holds after a take-back, a crash or a reload (rebuilt from it)."""
        t = self.topics[topic]
        t.reset()
        for pos, msg in sorted(entries.items()):
            self.appended(topic, pos, msg)

    def receipted(self, topic: str, producer: str, sequence_id: int) -> None:
        self.receipts += 1
        self.topics[topic].receipted.add((producer, sequence_id))

    # -- consumers --------------------------------------------------------------------
    def sub(self, topic: str, name: str, sub_type: str, partition: int) -> SubState:
        t = self.topics[topic]
        s = t.subs.get(name)
        if s is None:
            s = t.subs[name] = SubState(topic, name, sub_type, partition)
        return s

    def joined(self, topic: str, sub: str, sub_type: str, partition: int, consumer: str) -> None:
        s = self.sub(topic, sub, sub_type, partition)
        if s.sub_type != sub_type and s.consumers:
            raise BrokerViolation(f"{topic}/{sub}: {consumer} joined as {sub_type} beside {s.sub_type} consumers")
        s.sub_type = sub_type
        if sub_type == EXCLUSIVE and s.consumers:
            raise BrokerViolation(f"{topic}/{sub}: {consumer} joined the Exclusive subscription beside "
                                  f"{sorted(s.consumers)}")
        s.consumers[consumer] = set()

    def left(self, topic: str, sub: str, consumer: str) -> None:
        """The consumer closed (or the broker closed it): what it held goes back."""
        s = self.topics[topic].subs[sub]
        for pos in s.consumers.pop(consumer, set()):
            if s.holder.get(pos) == consumer:
                del s.holder[pos]

    def made_inactive(self, topic: str, sub: str, consumer: str) -> None:
        """Failover: the broker took back what the consumer held (it may still acknowledge it)."""
        s = self.topics[topic].subs[sub]
        for pos in list(s.consumers.get(consumer, ())):
            s.release(consumer, pos)

    def expected_active(self, s: SubState) -> str | None:
        names = sorted(s.consumers)
        if not names:
            return None
        return names[s.partition % len(names)] if s.partition >= 0 else names[0]

    def delivered(self, topic: str, sub: str, consumer: str, pos: Position, msg: Msg, now_ms: int) -> None:
        t = self.topics[topic]
        s = t.subs[sub]
        self.deliveries += 1
        self.checks["deliveries_checked"] += 1
        kind = f"deliveries_{s.sub_type}" + ("_beside_others" if len(s.consumers) > 1 else "")
        self.checks[kind] = self.checks.get(kind, 0) + 1
        where = f"{topic}/{sub} ({s.sub_type}): {pos}"
        if t.entries.get(pos) != msg:
            raise BrokerViolation(f"{where} sent to {consumer} as {msg}, but {t.entries.get(pos)} was stored there")
        if consumer not in s.consumers:
            raise BrokerViolation(f"{where} sent to {consumer}, which is not connected")
        if s.is_acked(pos):
            raise BrokerViolation(f"{where} sent to {consumer} after it was acknowledged")
        other = s.holder.get(pos)
        if other is not None:
            raise BrokerViolation(f"{where} sent to {consumer} while {other} holds it")
        if s.sub_type in (EXCLUSIVE, FAILOVER):
            active = self.expected_active(s)
            if consumer != active:
                raise BrokerViolation(f"{where} sent to {consumer}; the active consumer is {active}")
            self._check_order(t, s, consumer, pos, t.order, lambda m: True)
            self.checks["subscription_order_checks"] += 1
        if s.sub_type in (SHARED, KEY_SHARED) and msg.deliver_at is not None:
            self.delayed_delivered += 1
            if now_ms + self.delayed_slack_ms < msg.deliver_at:
                raise BrokerViolation(f"{where} sent at {now_ms}, before its delivery time {msg.deliver_at}")
        if s.sub_type == KEY_SHARED:
            for p, c in s.holder.items():
                held = t.entries.get(p)
                if c != consumer and held is not None and held.key == msg.key:
                    raise BrokerViolation(f"{where} (key {msg.key}) sent to {consumer} while {c} holds {p} "
                                          f"of the same key")
            if msg.deliver_at is None and pos not in s.sent_back:
                self._check_order(t, s, consumer, pos, t.by_key[msg.key], lambda m: m.deliver_at is None)
                self.checks["key_order_checks"] += 1
        s.holder[pos] = consumer
        s.consumers[consumer].add(pos)
        s.sent_back.discard(pos)
        s.delivered.add(pos)

    def _check_order(self, t: TopicState, s: SubState, consumer: str, pos: Position,
                     group: list[Position], same_group: Callable[[Msg], bool]) -> None:
        """Every earlier entry of the group not acknowledged (nor sent back) is at ``consumer``."""
        for p in group[bisect_right(group, s.acked_upto):bisect_left(group, pos)]:
            if p in s.acked or p in s.sent_back or not same_group(t.entries[p]):
                continue
            holder = s.holder.get(p)
            if holder != consumer:
                raise BrokerViolation(f"{t.name}/{s.name} ({s.sub_type}): {pos} ({t.entries[pos].key}) "
                                      f"sent to {consumer} before earlier {p}, "
                                      + (f"held by {holder}" if holder else "never delivered or given back"))

    def acked(self, topic: str, sub: str, consumer: str, positions: Iterable[Position]) -> None:
        s = self.topics[topic].subs[sub]
        for pos in positions:
            self.acks += 1
            s.acked.add(pos)
            s.ever_acked.add(pos)
            holder = s.holder.pop(pos, None)
            if holder is not None:
                s.consumers.get(holder, set()).discard(pos)

    def acked_cumulative(self, topic: str, sub: str, consumer: str, upto: Position) -> None:
        s = self.topics[topic].subs[sub]
        self.acks += 1
        s.acked_upto = max(s.acked_upto, upto)
        s.ever_skipped_upto = max(s.ever_skipped_upto, upto)
        for pos in [p for p in s.holder if p <= upto]:
            s.consumers.get(s.holder.pop(pos), set()).discard(pos)

    def sent_back(self, topic: str, sub: str, consumer: str, positions: Iterable[Position]) -> None:
        s = self.topics[topic].subs[sub]
        for pos in positions:
            if s.holder.get(pos) == consumer:
                s.release(consumer, pos)
                s.sent_back.add(pos)

    def seeked(self, topic: str, sub: str, mark: Position) -> None:
        s = self.topics[topic].subs[sub]
        if s.consumers:
            raise BrokerViolation(f"{topic}/{sub}: a seek left {sorted(s.consumers)} connected")
        s.seek_mark = mark
        s.ever_skipped_upto = max(s.ever_skipped_upto, mark)
        s.acked_upto = mark
        s.acked = set()
        s.sent_back = set()
        s.delivered = {p for p in s.delivered if p <= mark}

    def restored(self, topic: str, subs: dict[str, Callable[[Position], bool]]) -> None:
        """The topic was loaded again (restart, unload): its clients are gone and each
        subscription's acknowledgements are what its restored cursor says; that cursor
        must not acknowledge what no application did."""
        t = self.topics[topic]
        for name, s in t.subs.items():
            if s.consumers:
                raise BrokerViolation(f"{topic}/{name}: {sorted(s.consumers)} still connected across a reload")
            is_acked = subs.get(name)
            if is_acked is None:
                raise BrokerViolation(f"{topic}/{name}: the subscription was lost by a reload")
            self.checks["restored_cursors_checked"] += 1
            s.holder.clear()
            s.sent_back.clear()
            s.acked = set()
            s.acked_upto = BEFORE_START
            for pos in t.entries:
                if is_acked(pos):
                    if pos not in s.ever_acked and pos > s.ever_skipped_upto:
                        raise BrokerViolation(f"{topic}/{name}: the restored cursor acknowledges {pos}, "
                                              f"which no application acknowledged")
                    s.acked.add(pos)

    # -- the end -----------------------------------------------------------------------
    def check_end(self, backlogs: dict[tuple[str, str], int]) -> None:
        for t in self.topics.values():
            for producer, seq in sorted(t.receipted):
                positions = t.where.get((producer, seq))
                if not positions:
                    raise BrokerViolation(f"{t.name}: {producer} sequence id {seq} was receipted and is lost")
                for s in t.subs.values():
                    if not any(p in s.delivered or p <= s.seek_mark for p in positions):
                        raise BrokerViolation(f"{t.name}/{s.name}: receipted {producer} sequence id {seq} at "
                                              f"{positions[0]} was never delivered")
            for s in t.subs.values():
                backlog = backlogs.get((t.name, s.name), 0)
                if backlog:
                    raise BrokerViolation(f"{t.name}/{s.name}: backlog {backlog} after everything was acknowledged")
