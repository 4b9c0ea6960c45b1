"""Invariants of the command-level simulation, kept apart from the broker they judge.

The checker sees what the clients see (receipts, MESSAGE frames, active-consumer
changes, the commands they send) and what storage holds (entries appended, taken back,
lost by a crash), and holds the broker to Pulsar's promises:

* no loss: a message the producer got a receipt for (a duplicate's receipt included)
  reaches every durable subscription confirmed before it was first sent, until an
  application acknowledges it there (or a seek or cumulative ack moves past it);
* Key_Shared: a key is outstanding at one consumer at most, and an entry of a key goes
  out only when every earlier entry of that key is acknowledged or outstanding at the
  same consumer (entries sent back by a nack, and delayed entries, are exempt: the
  contract gives up their order);
* deduplication: on a deduplicating topic a producer's sequence id is stored at most
  once, and a producer's receipts come in the order of its sends;
* delayed delivery: on Shared and Key_Shared, never before ``deliver_at_time`` (less the
  tick, as Pulsar allows unless ``isDelayedDeliveryDeliverAtTimeStrict``);
* Exclusive: one consumer attached; Failover: only the consumer last told it is active
  receives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from magnetar.core.positions import Position

#: a consumer as the checker knows it: (connection, consumer id)
ConsumerKey = tuple[str, int]
#: a message as its producer knows it: (topic, producer name, sequence id)
MessageKey = tuple[str, str, int]

SHARED, KEY_SHARED, EXCLUSIVE, FAILOVER = "Shared", "Key_Shared", "Exclusive", "Failover"


class CommandViolation(AssertionError):
    """A promise of Pulsar's broke; the message says which and where."""


@dataclass(slots=True)
class StoredEntry:
    pos: Position
    message: MessageKey
    key: str
    deliver_at: int | None


@dataclass
class SubState:
    topic: str
    name: str
    sub_type: str
    #: the checker's clock when the subscription was confirmed (durable), None before
    since: int | None = None
    #: entries the applications acknowledged (a seek back forgets those after it)
    acked: set[Position] = field(default_factory=set)
    #: messages acknowledged, or passed by a seek or cumulative ack: no longer owed
    done: set[MessageKey] = field(default_factory=set)
    nacked: set[Position] = field(default_factory=set)
    outstanding: dict[ConsumerKey, set[Position]] = field(default_factory=dict)
    #: entries acknowledged since the broker last started (a crash may lose earlier acks)
    acked_live: set[Position] = field(default_factory=set)
    #: entries delivered before the topic moved to another broker after its consumers had
    #: acknowledged everything they held: none of them comes again (until a crash or a seek)
    moved_acked: set[Position] = field(default_factory=set)
    #: key -> consumer -> entries of that key outstanding there
    key_holders: dict[str, dict[ConsumerKey, int]] = field(default_factory=dict)
    attached: set[ConsumerKey] = field(default_factory=set)
    active: ConsumerKey | None = None


@dataclass
class TopicState:
    name: str
    dedup: bool
    entries: dict[Position, StoredEntry] = field(default_factory=dict)
    #: key -> its entries' positions, in append order
    by_key: dict[str, list[Position]] = field(default_factory=dict)
    #: where each message is stored (its last copy)
    stored: dict[MessageKey, Position] = field(default_factory=dict)


class CommandChecker:
    def __init__(self, classic_key_shared: bool = False, delayed_slack_ms: int = 0) -> None:
        self.classic = classic_key_shared
        #: how early a delayed message may go: the tick, unless isDelayedDeliveryDeliverAtTimeStrict
        self.delayed_slack_ms = delayed_slack_ms
        self.clock = 0
        self.topics: dict[str, TopicState] = {}
        self.subs: dict[tuple[str, str], SubState] = {}
        #: message -> the checker's clock when it was first sent
        self.first_sent: dict[MessageKey, int] = {}
        self.receipted: set[MessageKey] = set()
        #: the consumer each attached consumer key belongs to
        self.consumer_sub: dict[ConsumerKey, tuple[str, str]] = {}
        self.deliveries = 0
        self.checked_orders = 0
        #: subscriptions deleted and not yet answered: a crash may bring them back
        self.deleting: dict[tuple[str, str], SubState] = {}

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def topic(self, name: str, dedup: bool = False) -> TopicState:
        state = self.topics.get(name)
        if state is None:
            state = self.topics[name] = TopicState(name, dedup)
        return state

    # -- storage -----------------------------------------------------------------------
    def appended(self, topic: str, entries: Iterable[StoredEntry]) -> None:
        state = self.topic(topic)
        for entry in entries:
            twice = state.stored.get(entry.message)
            if twice is not None and state.dedup:
                raise CommandViolation(f"{entry.message} stored twice on a deduplicating topic: at {twice} "
                                       f"and {entry.pos}")
            state.stored[entry.message] = entry.pos
            state.entries[entry.pos] = entry
            state.by_key.setdefault(entry.key, []).append(entry.pos)

    def lost_from(self, topic: str, first: Position) -> None:
        """Entries from ``first`` on are gone (taken back after a failed write, or not
        synced before a crash)."""
        state = self.topic(topic)
        for pos in [p for p in state.entries if p >= first]:
            entry = state.entries.pop(pos)
            state.by_key[entry.key].remove(pos)
            if state.stored.get(entry.message) == pos:
                del state.stored[entry.message]

    # -- producers ----------------------------------------------------------------------
    def sent(self, message: MessageKey) -> None:
        self.first_sent.setdefault(message, self.tick())

    def receipt(self, message: MessageKey) -> None:
        self.receipted.add(message)

    # -- subscriptions --------------------------------------------------------------------
    def subscribing(self, topic: str, name: str, sub_type: str, consumer: ConsumerKey) -> None:
        """SUBSCRIBE sent: the broker may tell the consumer it is active before it answers."""
        sub = self.subs.get((topic, name))
        if sub is None:
            sub = self.subs[(topic, name)] = SubState(topic, name, sub_type)
        self.consumer_sub[consumer] = (topic, name)

    def subscribed(self, consumer: ConsumerKey) -> None:
        """SUBSCRIBE succeeded: the subscription is durable from here on."""
        sub = self._sub_of(consumer)
        if sub is None:
            return
        if sub.since is None:
            sub.since = self.tick()
        sub.attached.add(consumer)

    def unsubscribed(self, topic: str, name: str) -> None:
        """The broker deleted the subscription; until that is durable (the answer), a crash
        may bring it back with the acknowledgements it had."""
        sub = self.subs.pop((topic, name), None)
        if sub is not None:
            for consumer in sub.attached:
                self.consumer_sub.pop(consumer, None)
            self.deleting[(topic, name)] = sub

    def unsubscribe_answered(self, topic: str, name: str) -> None:
        self.deleting.pop((topic, name), None)

    def detached(self, consumer: ConsumerKey) -> None:
        """The consumer is gone (closed by either side): what it held goes back."""
        found = self.consumer_sub.pop(consumer, None)
        sub = self.subs.get(found) if found is not None else None
        if sub is None:
            return
        sub.attached.discard(consumer)
        if sub.active == consumer:
            sub.active = None
        for pos in sub.outstanding.pop(consumer, set()):
            self._release_key(sub, consumer, pos)
            if self.classic:
                sub.nacked.add(pos)

    def active_change(self, consumer: ConsumerKey, is_active: bool) -> None:
        found = self.consumer_sub.get(consumer)
        sub = self.subs.get(found) if found is not None else None
        if sub is None:
            return
        if is_active:
            sub.active = consumer
            return
        if sub.active == consumer:
            sub.active = None
        # what it holds goes to the new active consumer (the client keeps it and may still ack)
        for pos in sub.outstanding.pop(consumer, set()):
            self._release_key(sub, consumer, pos)

    def _sub_of(self, consumer: ConsumerKey) -> SubState | None:
        found = self.consumer_sub.get(consumer)
        return self.subs.get(found) if found is not None else None

    def delivered(self, consumer: ConsumerKey, pos: Position, now_ms: int) -> None:
        sub = self._sub_of(consumer)
        if sub is None:
            return  # a subscription confirmed after this delivery, or one unsubscribed
        self.deliveries += 1
        entry = self.topics[sub.topic].entries.get(pos)
        if entry is None:
            raise CommandViolation(f"{sub.topic} {sub.name}: {pos} delivered, but storage has no such entry")
        where = f"{sub.topic} {sub.name} ({sub.sub_type}): {pos} to {consumer}"
        if entry.deliver_at is not None and now_ms + self.delayed_slack_ms < entry.deliver_at \
                and sub.sub_type in (SHARED, KEY_SHARED):
            raise CommandViolation(f"{where} at {now_ms}, before its deliver_at_time {entry.deliver_at} "
                                   f"(less {self.delayed_slack_ms} ms)")
        if pos in sub.moved_acked:
            raise CommandViolation(f"{where}: delivered before the topic was handed over with nothing "
                                   f"outstanding, delivered again after it")
        if sub.sub_type == FAILOVER and sub.active != consumer:
            raise CommandViolation(f"{where}, but the active consumer is {sub.active}")
        if sub.sub_type == EXCLUSIVE and sub.attached != {consumer}:
            raise CommandViolation(f"{where}, but the consumers attached are {sorted(sub.attached)}")
        if sub.sub_type in (SHARED, KEY_SHARED):
            for holder in sub.outstanding:
                if holder != consumer and pos in sub.outstanding[holder]:
                    raise CommandViolation(f"{where} while {holder} still holds it")
        if sub.sub_type == KEY_SHARED:
            self._check_key(sub, entry, consumer, where)
        held = sub.outstanding.setdefault(consumer, set())
        if pos not in held:
            held.add(pos)
            holders = sub.key_holders.setdefault(entry.key, {})
            holders[consumer] = holders.get(consumer, 0) + 1
        sub.nacked.discard(pos)

    def _check_key(self, sub: SubState, entry: StoredEntry, consumer: ConsumerKey, where: str) -> None:
        others = [c for c, n in sub.key_holders.get(entry.key, {}).items() if n and c != consumer]
        if others:
            raise CommandViolation(f"{where}: key {entry.key!r} is outstanding at {others} as well")
        if entry.deliver_at is not None:
            return
        self.checked_orders += 1
        entries = self.topics[sub.topic].entries
        held = sub.outstanding.get(consumer, set())
        for earlier in self.topics[sub.topic].by_key.get(entry.key, ()):
            if earlier >= entry.pos:
                break
            other = entries[earlier]
            if earlier in sub.acked or other.message in sub.done or earlier in sub.nacked \
                    or other.deliver_at is not None or earlier in held:
                continue
            raise CommandViolation(f"{where}: key {entry.key!r} out of order, the earlier {earlier} is neither "
                                   f"acknowledged nor outstanding there")

    def _release_key(self, sub: SubState, consumer: ConsumerKey, pos: Position) -> None:
        entry = self.topics[sub.topic].entries.get(pos)
        if entry is None:
            return
        holders = sub.key_holders.get(entry.key)
        if holders and holders.get(consumer):
            holders[consumer] -= 1
            if not holders[consumer]:
                del holders[consumer]

    def acked(self, consumer: ConsumerKey, positions: Iterable[Position]) -> None:
        sub = self._sub_of(consumer)
        if sub is None:
            return
        entries = self.topics[sub.topic].entries
        for pos in positions:
            sub.acked.add(pos)
            sub.acked_live.add(pos)
            entry = entries.get(pos)
            if entry is not None:
                sub.done.add(entry.message)
            for holder, holding in sub.outstanding.items():
                if pos in holding:
                    holding.discard(pos)
                    self._release_key(sub, holder, pos)

    def acked_up_to(self, consumer: ConsumerKey, upto: Position) -> None:
        """A cumulative ack: every entry up to ``upto``, wherever it is outstanding."""
        sub = self._sub_of(consumer)
        if sub is not None:
            self._pass(sub, lambda pos: pos <= upto)

    def nacked(self, consumer: ConsumerKey, positions: Iterable[Position] | None) -> None:
        """Sent back (REDELIVER_UNACKNOWLEDGED_MESSAGES); None: everything it holds."""
        sub = self._sub_of(consumer)
        if sub is None:
            return
        holding = sub.outstanding.get(consumer, set())
        for pos in list(holding) if positions is None else positions:
            if pos in holding:
                holding.discard(pos)
                self._release_key(sub, consumer, pos)
                sub.nacked.add(pos)

    def handed_over(self, topic: str, drained: bool) -> None:
        """The topic moved to another broker (unloaded, loaded again from storage); its
        consumers had acknowledged everything they held when ``drained``."""
        for sub in self.subs.values():
            if sub.topic == topic:
                # drained: nothing was outstanding, so nothing delivered so far may come again
                held = set().union(*sub.outstanding.values()) if sub.outstanding else set()
                sub.moved_acked = sub.acked_live | held if drained else set()

    def seeked(self, topic: str, name: str, start: Position | None) -> None:
        """A seek to the entry at ``start`` (None: to the earliest): entries before it count
        as consumed, the rest as never delivered."""
        sub = self.subs.get((topic, name))
        if sub is None:
            return
        sub.moved_acked.clear()
        sub.acked_live.clear()
        if start is not None:
            self._pass(sub, lambda pos: pos < start)
            sub.acked = {p for p in sub.acked if p < start}
        else:
            sub.acked = set()
        sub.nacked.clear()

    def _pass(self, sub: SubState, passed: Callable[[Position], bool]) -> None:
        """Entries ``passed`` selects count as acknowledged (a seek or cumulative ack went past them)."""
        for pos, entry in self.topics[sub.topic].entries.items():
            if passed(pos):
                sub.acked.add(pos)
                sub.acked_live.add(pos)
                sub.done.add(entry.message)
                for holder, holding in sub.outstanding.items():
                    if pos in holding:
                        holding.discard(pos)
                        self._release_key(sub, holder, pos)

    def broker_restarted(self) -> None:
        """Every connection died with the broker: nothing is outstanding anywhere, and a
        subscription whose deletion was not durable may be back with its old cursor."""
        for key, old in self.deleting.items():
            sub = self.subs.get(key)
            if sub is None:  # back as it was, owing nothing until a consumer is confirmed again
                sub = self.subs[key] = SubState(old.topic, old.name, old.sub_type)
            sub.acked |= old.acked
            sub.done |= old.done
        self.deleting.clear()
        for sub in self.subs.values():
            sub.outstanding.clear()
            sub.key_holders.clear()
            sub.attached.clear()
            sub.active = None
            sub.moved_acked.clear()
            sub.acked_live.clear()
        self.consumer_sub.clear()

    # -- the end ------------------------------------------------------------------------------
    def owed(self) -> list[tuple[str, str, MessageKey]]:
        """(topic, subscription, message) for every receipted message a subscription still owes."""
        missing = []
        for sub in self.subs.values():
            for message in self.receipted:
                if sub.since is not None and message[0] == sub.topic and self.first_sent[message] > sub.since \
                        and message not in sub.done:
                    missing.append((sub.topic, sub.name, message))
        return sorted(missing)

    def check_end(self) -> None:
        missing = self.owed()
        if missing:
            raise CommandViolation(f"{len(missing)} receipted messages never consumed, e.g. {missing[:3]}")


__all__ = ["CommandChecker", "CommandViolation", "StoredEntry"]
