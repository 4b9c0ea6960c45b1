"""Hand-written Key_Shared scenarios on the simulated world, checked by the same checkers.

A regression test reads as the story it tells (who joins, what is published, who
acknowledges), and every step is still judged against the whole contract: a scenario
that breaks single ownership or order fails even if its own assertions would pass.

    s = Scenario(classic=False)
    s.join("c1", queue=1)
    a1 = s.publish("key-a")
    assert s.keys_of("c1") == ["key-a"]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from magnetar.core.key_shared.consistent_hashing import ConsistentHashingStickyKeyConsumerSelector
from magnetar.core.key_shared.hash_range_auto_split import HashRangeAutoSplitStickyKeyConsumerSelector
from magnetar.core.key_shared.sticky_key import sticky_key_hash
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.testing.sim.actions import act, format_indexes, format_ranges
from magnetar.testing.sim.checkers import ContractChecker
from magnetar.testing.sim.options import AUTO_SPLIT_CONSISTENT, AUTO_SPLIT_RANGES, SimOptions
from magnetar.testing.sim.runner import check_agreement, check_drained_system, contract_of
from magnetar.testing.sim.world import SimClient, World


class Scenario:
    def __init__(self, selector: str = AUTO_SPLIT_CONSISTENT, classic: bool = False, **options: object) -> None:
        self.options = SimOptions.scenario(selector, classic, **options)
        self.checker = ContractChecker(contract_of(self.options))
        self.world = World(self.options, self.checker)
        self.published: dict[Position, str] = {}

    # -- steps -----------------------------------------------------------------------
    def _do(self, verb: str, *args: object, check: bool = True) -> None:
        if not self.world.apply(act(verb, *args)):
            raise AssertionError(f"step did not apply: {verb} {' '.join(map(str, args))}")
        if check:
            check_agreement(self.world)

    def join(self, name: str, queue: int = 1000, ranges: list[tuple[int, int]] | None = None,
             consumer_name: str | None = None) -> SimClient:
        """Subscribe; ``consumer_name`` is what the broker sees (several clients may share one)."""
        if consumer_name is not None:
            self.world.consumer_names[name] = consumer_name
        self._do("join", name, queue, *([format_ranges(ranges)] if ranges else []))
        return self.world.clients[name]

    def publish(self, key: str, count: int = 1, persist: bool = True, delay_ms: int | None = None) -> Position:
        """One entry (a batch of ``count`` when > 1), delivered no earlier than ``delay_ms`` from now."""
        self._do("publish", key, count, *([delay_ms] if delay_ms is not None else []), check=persist)
        pos = self.world.last_published
        assert pos is not None
        self.published[pos] = key
        if persist:
            self.persist()
        return pos

    def publish_many(self, keys: Iterable[str]) -> list[Position]:
        positions = [self.publish(k, persist=False) for k in keys]
        self.persist()
        return positions

    def persist(self) -> None:
        self._do("persist")

    def receive(self, name: str) -> list[Position]:
        """The application takes everything in its receiver queue (FLOW follows as in the client)."""
        client = self.world.clients[name]
        taken = [d.pos for d in client.inbox]
        if taken:
            self._do("receive", name, len(taken))
        return taken

    def _indexes(self, name: str, positions: Iterable[Position] | None) -> str:
        received = [d.pos for d in self.world.clients[name].received]
        wanted = received if positions is None else list(positions)
        return format_indexes([received.index(p) for p in wanted])

    def ack(self, name: str, positions: Iterable[Position] | None = None) -> None:
        """Acknowledge received entries (all of them by default); receives first if needed."""
        self.receive(name)
        indexes = self._indexes(name, positions)
        if indexes:
            self._do("ack", name, indexes)

    def nack(self, name: str, positions: Iterable[Position] | None = None) -> None:
        self.receive(name)
        self._do("nack", name, self._indexes(name, positions))

    def ack_part(self, name: str, index: int, batch_index: int) -> None:
        """Acknowledge one message of the ``index``-th received batch."""
        self._do("ack-part", name, index, batch_index)

    def nack_all(self, name: str) -> None:
        """redeliverUnacknowledgedMessages: the client drops its queue and the broker sends all again."""
        self._do("nack-all", name)

    def crash(self, name: str) -> None:
        self._do("crash", name)

    def leave(self, name: str) -> None:
        self._do("leave", name)

    def reconnect(self, name: str) -> None:
        self._do("reconnect", name)

    def flow(self, name: str, permits: int) -> None:
        self._do("flow", name, permits)

    def expire(self, upto: Position) -> None:
        """Message TTL (the broker's expire_messages): the mark-delete position jumps to ``upto``."""
        self._do("expire", upto)

    def tick(self, ms: int) -> None:
        self._do("tick", ms)

    def drain(self) -> None:
        """Every consumer receives and acknowledges until nothing moves; then all must be consumed."""
        for _ in range(10_000):
            moved = False
            for client in self.world.connected():
                if client.inbox or client.received:
                    self.ack(client.name)
                    moved = True
            if not moved and self.world.drained():
                break
            deadline = self.world.next_deadline_ms()
            if deadline is not None:
                self.tick(max(1, deadline - self.world.now_ms))
            elif not moved:
                break
        self.checker.check_drained()
        check_drained_system(self.world)

    # -- what happened -------------------------------------------------------------
    def delivered(self, name: str) -> list[Position]:
        """Everything sent to the consumer and not yet taken, then what it took (in order)."""
        client = self.world.clients[name]
        return [d.pos for d in client.received] + [d.pos for d in client.inbox]

    def inbox(self, name: str) -> list[Position]:
        return [d.pos for d in self.world.clients[name].inbox]

    def keys_of(self, name: str) -> list[str]:
        return [self.published[p] for p in self.delivered(name)]

    def core(self, name: str) -> Consumer:
        core = self.world.clients[name].core
        assert core is not None, f"{name} is not connected"
        return core

    @property
    def dispatcher(self):  # type: ignore[no-untyped-def]
        return self.world.dispatcher


def find_key(owner_of: Callable[[int], bool], prefix: str = "key") -> str:
    """The first key ``prefix-N`` whose sticky hash satisfies ``owner_of``."""
    for i in range(1_000_000):
        key = f"{prefix}-{i}"
        if owner_of(sticky_key_hash(key.encode())):
            return key
    raise LookupError("no key found")


class _Named:
    def __init__(self, name: str) -> None:
        self.consumer_name = name

    def __repr__(self) -> str:
        return self.consumer_name


def owners(selector: str, names: list[str], replica_points: int = 100) -> Callable[[int], str | None]:
    """Which consumer name a hash maps to after ``names`` joined in that order."""
    picker: Any = ConsistentHashingStickyKeyConsumerSelector(replica_points) \
        if selector == AUTO_SPLIT_CONSISTENT else HashRangeAutoSplitStickyKeyConsumerSelector()
    assert selector in (AUTO_SPLIT_CONSISTENT, AUTO_SPLIT_RANGES)
    for name in names:
        picker.add_consumer(_Named(name))

    def owner(sticky_hash: int) -> str | None:
        chosen = picker.select(sticky_hash)
        return None if chosen is None else chosen.consumer_name
    return owner


def key_moving(selector: str, before: list[str], after: list[str], owner_before: str, owner_after: str,
               prefix: str = "key") -> str:
    """A key owned by ``owner_before`` among ``before`` and by ``owner_after`` among ``after``."""
    first, second = owners(selector, before), owners(selector, after)
    return find_key(lambda h: first(h) == owner_before and second(h) == owner_after, prefix)
