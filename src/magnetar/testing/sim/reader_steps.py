"""The schedule's reader steps (``reader-open``, ``reader-receive``, ``reader-close``): what a
reader application does to the world's topic, kept apart from the consumers' steps so the
world stays one class of consumer steps and views."""

from __future__ import annotations

from typing import Protocol

from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.topics.topic import Topic
from magnetar.testing.sim.checkers import Violation
from magnetar.testing.sim.options import EXCLUSIVE
from magnetar.testing.sim.readers import ReaderSink, SimReader, start_after


class ReaderWorld(Protocol):
    """What the reader steps use of the world."""

    readers: dict[str, SimReader]
    readers_seen: list[SimReader]
    order: list[Position]
    entries: dict[Position, bytes]
    messages: dict[Position, int]
    topic: Topic
    next_consumer_id: int
    now_ms: int

    def note(self, text: str) -> None: ...


class ReaderSteps:
    def __init__(self, world: ReaderWorld) -> None:
        self.world = world

    def open(self, name: str, start: str, queue: str) -> bool:
        world = self.world
        if name in world.readers:
            return False
        at = None if start == "earliest" else Position.parse(start)
        after = start_after(at, world.topic.last_readable())
        first = next((i for i, p in enumerate(world.order) if p > after), len(world.order))
        reader = SimReader(name, int(queue), world.order, world.entries, first)
        core = Consumer(world.next_consumer_id, reader.subscription, ReaderSink(reader, world.note),
                        sub_type=EXCLUSIVE)
        world.next_consumer_id += 1
        reader.core = core
        world.readers[name] = reader
        world.readers_seen.append(reader)
        reader.sub = world.topic.subscribe(reader.subscription, core, world.now_ms, durable=False,
                                           initial_earliest=at is None, start=at)
        self._flow(reader, reader.queue_size)
        return True

    def _flow(self, reader: SimReader, permits: int) -> None:
        assert reader.core is not None and reader.sub is not None
        reader.permits += permits
        reader.sub.dispatcher.on_flow(reader.core, permits, self.world.now_ms)

    def receive(self, name: str, count: str) -> bool:
        reader = self.world.readers.get(name)
        if reader is None or not reader.inbox:
            return False
        for _ in range(min(int(count), len(reader.inbox))):
            reader.consumed += self.world.messages[reader.inbox.popleft()]
        if reader.consumed >= max(1, reader.queue_size // 2):
            permits, reader.consumed = reader.consumed, 0
            self._flow(reader, permits)
        return True

    def close(self, name: str) -> bool:
        world = self.world
        reader = world.readers.pop(name, None)
        if reader is None:
            return False
        assert reader.core is not None and reader.sub is not None
        world.topic.remove_consumer(reader.sub, reader.core, world.now_ms)
        if reader.subscription in world.topic.subscriptions:
            raise Violation(f"reader {name}'s non-durable subscription outlived it")
        return True
