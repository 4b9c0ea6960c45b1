"""Random schedule steps, chosen from the world's current state and the seed's weights.

The generator only proposes; the world executes. A proposal depends on what the
world looks like (who is connected, what each application has received), which is
itself determined by the seed, so one seed always yields one schedule.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from magnetar.testing.sim.actions import Action, act, format_indexes, format_ranges
from magnetar.testing.sim.options import EXCLUSIVE, SimOptions
from magnetar.testing.sim.world import SimClient, World

BEHAVIORS = ("normal", "normal", "slow", "stalled")


class ScheduleGenerator:
    def __init__(self, options: SimOptions) -> None:
        self.options = options
        self.rng = random.Random(f"schedule-{options.seed}")
        self.verbs = [verb for verb, _ in options.weights]
        self.cumulative = list(accumulate(weight for _, weight in options.weights))
        weights = [1.0 / (i + 1) ** options.key_skew for i in range(options.keys)]
        self.key_cumulative = list(accumulate(weights))
        self.names = 0

    def next_action(self, world: World) -> Action | None:
        """A step that applies to the world now, or None after a few unlucky draws."""
        return weighted_proposal(self, world)

    # -- traffic ------------------------------------------------------------------
    def _publish(self, world: World) -> Action:
        o, rng = self.options, self.rng
        if rng.random() < o.keyless_probability:
            key = "-"
        else:
            i = bisect_left(self.key_cumulative, rng.random() * self.key_cumulative[-1])
            key = f"k{i}" + ("@o" if rng.random() < o.ordering_key_probability else "")
        count = rng.randint(2, 5) if rng.random() < o.batch_probability else 1
        if rng.random() < o.delayed_probability:
            return act("publish", key, count, rng.choice((1, 20, 200)))
        return act("publish", key, count)

    def _persist(self, world: World) -> Action:
        return act("persist")

    def _expire(self, world: World) -> Action | None:
        sub, last = world.sub, world.topic.last_readable()
        if sub is None or last is None or last <= sub.cursor.mark_delete:
            return None
        later = [p for p in world.entries if sub.cursor.mark_delete < p <= last]
        return act("expire", self.rng.choice(sorted(later))) if later else None

    def _tick(self, world: World) -> Action:
        return act("tick", self.rng.choice((1, 2, 5, 20, 100)))

    # -- consumers ------------------------------------------------------------------
    def _join(self, world: World) -> Action | None:
        o, rng = self.options, self.rng
        limit = 1 if o.sub_type == EXCLUSIVE else o.max_consumers
        if len(world.connected()) >= limit:
            return None
        gone = [c.name for c in world.clients.values() if c.core is None]
        if gone and rng.random() < 0.4:
            name = rng.choice(gone)
        else:
            self.names += 1
            name = f"c{self.names}"
        queue = rng.choice(o.queue_sizes)
        if not o.sticky:
            return act("join", name, queue)
        free = free_slots(world)
        if not free:
            return None
        claimed = rng.sample(free, k=rng.randint(1, len(free)))
        return act("join", name, queue, format_ranges(sorted(claimed)))

    def _join_bad(self, world: World) -> Action | None:
        o, rng = self.options, self.rng
        self.names += 1
        name = f"c{self.names}"
        if not world.key_shared:
            if not world.connected():
                return None
            kind = "exclusive" if o.sub_type == EXCLUSIVE and rng.random() < 0.5 else "type"
            return act("join-bad", name, 10, kind)
        if o.sticky and rng.random() < 0.7:
            taken = [s for s in o.sticky_slots if s not in free_slots(world)]
            if taken and rng.random() < 0.5:
                start, end = rng.choice(taken)
                return act("join-bad", name, 10, "conflict", format_ranges([(start, rng.randint(start, end))]))
            bad = rng.choice(((500, 100), (0, 70000), (-3, 10)))
            return act("join-bad", name, 10, "invalid", format_ranges([bad]))
        if not world.connected():
            return None
        kind = rng.choice(("mode", "ooo", "type"))
        ranges = format_ranges([o.sticky_slots[0]]) if o.sticky else None
        return act("join-bad", name, 10, kind, *([ranges] if ranges else []))

    def _some_connected(self, world: World) -> SimClient | None:
        connected = world.connected()
        return self.rng.choice(connected) if connected else None

    def _leave(self, world: World) -> Action | None:
        c = self._some_connected(world)
        return act("leave", c.name) if c else None

    def _crash(self, world: World) -> Action | None:
        c = self._some_connected(world)
        return act("crash", c.name) if c else None

    def _reconnect(self, world: World) -> Action | None:
        c = self._some_connected(world)
        return act("reconnect", c.name) if c else None

    def _behave(self, world: World) -> Action | None:
        c = self._some_connected(world)
        return act("behave", c.name, self.rng.choice(BEHAVIORS)) if c else None

    def _flow(self, world: World) -> Action | None:
        c = self._some_connected(world)
        return act("flow", c.name, self.rng.randint(1, 5)) if c else None

    # -- applications -------------------------------------------------------------
    def _active(self, world: World, need: str) -> SimClient | None:
        """A consumer whose application is acting now and has something to act on."""
        candidates = [c for c in world.connected() if getattr(c, need)]
        candidates = [c for c in candidates if c.behavior == "normal"
                      or (c.behavior == "slow" and self.rng.random() < 0.2)]
        return self.rng.choice(candidates) if candidates else None

    def _receive(self, world: World) -> Action | None:
        c = self._active(world, "inbox")
        return act("receive", c.name, self.rng.randint(1, len(c.inbox))) if c else None

    def _pick(self, c: SimClient) -> str:
        n = len(c.received)
        if self.rng.random() < 0.6:
            return format_indexes(list(range(self.rng.randint(1, n))))
        return format_indexes(sorted(self.rng.sample(range(n), k=self.rng.randint(1, n))))

    def _ack(self, world: World) -> Action | None:
        c = self._active(world, "received")
        return act("ack", c.name, self._pick(c)) if c else None

    def _nack(self, world: World) -> Action | None:
        c = self._active(world, "received")
        return act("nack", c.name, self._pick(c)) if c else None

    def _nack_all(self, world: World) -> Action | None:
        c = self._active(world, "received")
        return act("nack-all", c.name) if c else None

    def _ack_cum(self, world: World) -> Action | None:
        if not self.options.single_active:
            return None
        c = self._active(world, "received")
        return act("ack-cum", c.name, self.rng.randrange(len(c.received))) if c else None

    def _ack_part(self, world: World) -> Action | None:
        c = self._active(world, "received")
        if c is None:
            return None
        batches = [i for i, d in enumerate(c.received) if d.messages > 1]
        if not batches:
            return None
        i = self.rng.choice(batches)
        return act("ack-part", c.name, i, self.rng.randrange(world.messages[c.received[i].pos]))


    # -- cursor moves and readers --------------------------------------------------
    def _seek(self, world: World) -> Action | None:
        if world.sub is None:
            return None
        if not world.order or self.rng.random() < 0.3:
            return act("seek", "earliest")
        return act("seek", self.rng.choice(world.order))

    def _reader_open(self, world: World) -> Action | None:
        if len(world.readers) >= 2:
            return None
        self.names += 1
        start = "earliest" if not world.order or self.rng.random() < 0.4 else self.rng.choice(world.order)
        return act("reader-open", f"r{self.names}", start, self.rng.choice(self.options.queue_sizes))

    def _reader_receive(self, world: World) -> Action | None:
        ready = [r for r in world.readers.values() if r.inbox]
        if not ready:
            return None
        r = self.rng.choice(ready)
        return act("reader-receive", r.name, self.rng.randint(1, len(r.inbox)))

    def _reader_close(self, world: World) -> Action | None:
        if not world.readers:
            return None
        return act("reader-close", self.rng.choice(sorted(world.readers)))


def free_slots(world: World) -> list[tuple[int, int]]:
    taken = {r for c in world.connected() for r in (c.ranges or ())}
    return [s for s in world.options.sticky_slots if s not in taken]


def weighted_proposal(generator: Any, world: object) -> Action | None:
    """Draw verbs by weight (``generator.verbs``, ``.cumulative``, ``.rng``) until the
    generator's ``_<verb>`` proposes a step for ``world``; None after a few unlucky draws."""
    for _ in range(8):
        verb = generator.verbs[bisect_left(generator.cumulative, generator.rng.random() * generator.cumulative[-1])]
        action: Action | None = getattr(generator, "_" + verb.replace("-", "_"))(world)
        if action is not None:
            return action
    return None
