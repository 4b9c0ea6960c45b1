"""Broker-wide schedules: one seed gives the world's options and every step; a run checks
the promises of :mod:`~magnetar.testing.sim.broker_checkers` after each step (safety,
faults on), then turns faults off and requires everything to drain (liveness): every
send receipted, every receipted message delivered to every subscription and acknowledged.

A failing run is shrunk (steps removed while it still fails) and printed as a schedule
that replays: ``python -m magnetar.testing.sim broker --seed S --schedule FILE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from magnetar.testing.sim.actions import Action, act, format_indexes
from magnetar.testing.sim.broker_checkers import EXCLUSIVE, FAILOVER, BrokerViolation
from magnetar.testing.sim.broker_storage import SimLedger
from magnetar.testing.sim.broker_world import (
    SUBSCRIPTIONS,
    TOPICS,
    BrokerWorld,
    ClientConsumer,
    WorldOptions,
    full_name,
    parse_broker_schedule,
)
from magnetar.testing.sim.generator import weighted_proposal

LIVENESS_ROUNDS_MAX = 400
#: the running digest of a run's steps (hashlib's type)
Hash = Any
KEYS = ("a", "b", "c", "d", "e", "f")


@dataclass(frozen=True)
class ScheduleOptions:
    """What a seed draws besides the world's options: the traffic and the faults."""

    steps: int
    #: per topic, the subscriptions in use
    subs: tuple[tuple[str, tuple[str, ...]], ...]
    weights: tuple[tuple[str, float], ...]
    delayed_probability: float
    max_consumers: int

    @classmethod
    def from_seed(cls, seed: int, steps: int | None = None) -> tuple[WorldOptions, ScheduleOptions]:
        rng = random.Random(f"broker-options-{seed}")
        world = WorldOptions(
            seed=seed,
            dedup_topics=frozenset(t for t in TOPICS if rng.random() < 0.6),
            entries_per_ledger=rng.choice((3, 5, 20, 1000)),
            dedup_snapshot_entries=rng.choice((2, 5, 1000)),
            strict_delayed=rng.random() < 0.5,
            tick_ms=rng.choice((1, 10, 100)),
        )
        names = list(SUBSCRIPTIONS)
        subs = tuple((t, tuple(sorted(rng.sample(names, rng.randint(1, 3))))) for t in TOPICS)
        faults = rng.random() < 0.85
        weights = {
            "send": 30, "flush": 10, "sync": 9, "complete": 11, "receive": 14, "ack": 12, "ack-cum": 3,
            "nack": 3, "redeliver": 1.5, "subscribe": 3.5, "close": 1.5, "producer": 1, "resend": 2,
            "cursors": 3, "fail-cursors": 0.5 if faults else 0, "tick": 6,
            "seek": 0.8 if rng.random() < 0.7 else 0, "reconnect": 0.6,
            "crash": rng.choice((0, 0.3, 1)) if faults else 0,
            "fail-flush": rng.choice((0, 0.7, 2)) if faults else 0,
            "fail-append": rng.choice((0, 0.5, 1.5)) if faults else 0,
            "fail-sync": rng.choice((0, 0.4, 1.2)) if faults else 0,
        }
        options = cls(
            steps=steps if steps is not None else rng.randint(80, 260),
            subs=subs,
            weights=tuple((k, float(v)) for k, v in weights.items() if v > 0),
            delayed_probability=rng.choice((0, 0.1, 0.3)),
            max_consumers=rng.randint(2, 6),
        )
        return world, options


@dataclass
class BrokerRunResult:
    seed: int
    world_options: WorldOptions
    steps: list[Action] = field(default_factory=list)
    violation: str | None = None
    failed_step: int | None = None
    #: the phase the violation came in (safety, liveness)
    phase: str = ""
    #: where the liveness steps begin in ``steps``
    liveness_from: int = 0
    digest: str = ""
    figures: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def schedule_text(self) -> str:
        o = self.world_options
        lines = [f"# seed {self.seed}: dedup on {sorted(o.dedup_topics)}, {o.entries_per_ledger} entries per ledger, "
                 f"tick {o.tick_ms} ms{' strict' if o.strict_delayed else ''}"]
        for i, step in enumerate(self.steps):
            if i == self.liveness_from and self.liveness_from:
                lines.append("# liveness: faults off, everything drains")
            lines.append(f"{step}{'   # <- violation' if i == self.failed_step else ''}")
        return "\n".join(lines)


class BrokerScheduleGenerator:
    def __init__(self, options: ScheduleOptions, seed: int) -> None:
        self.options = options
        self.rng = random.Random(f"broker-schedule-{seed}")
        self.verbs = [v for v, _ in options.weights]
        self.cumulative = list(accumulate(w for _, w in options.weights))
        self.names = 0
        self.subs = dict(options.subs)

    def setup(self) -> list[Action]:
        """Connections, a producer per topic, a consumer per subscription."""
        steps = [act("connect", f"n{i}") for i in range(3)]
        for i, topic in enumerate(TOPICS):
            steps.append(act("producer", f"n{i % 3}", f"p{i}", topic))
        for topic, subs in self.options.subs:
            for sub in subs:
                steps.append(self._new_consumer(topic, sub))
                if sub != "ex" and self.rng.random() < 0.6:
                    steps.append(self._new_consumer(topic, sub))
        return steps

    def _new_consumer(self, topic: str, sub: str) -> Action:
        self.names += 1
        return act("subscribe", f"n{self.rng.randrange(3)}", f"c{self.names}", topic, sub,
                   self.rng.choice((1, 2, 5, 20)))

    def next_action(self, world: BrokerWorld) -> Action | None:
        broken = [p for p in world.producers.values() if (p.broken and p.outstanding) or not p.connected]
        if broken and self.rng.random() < 0.15:
            return act("resend", self.rng.choice(broken).name)
        return weighted_proposal(self, world)

    # -- proposals -------------------------------------------------------------------------
    def _send(self, world: BrokerWorld) -> Action | None:
        ready = [p for p in world.producers.values() if p.connected]
        if not ready:
            return None
        producer = self.rng.choice(ready)
        key = self.rng.choice(KEYS)
        count = 1 if self.rng.random() < 0.7 else self.rng.randint(2, 5)
        if self.rng.random() < self.options.delayed_probability:
            return act("send", producer.name, key, count, self.rng.choice((1, 50, 500, 3000)))
        return act("send", producer.name, key, count)

    def _producer(self, world: BrokerWorld) -> Action | None:
        if len(world.producers) >= 8:
            return None
        self.names += 1
        return act("producer", f"n{self.rng.randrange(3)}", f"p{self.names}", self.rng.choice(TOPICS))

    def _resend(self, world: BrokerWorld) -> Action | None:
        waiting = [p for p in world.producers.values() if p.outstanding or not p.connected]
        return act("resend", self.rng.choice(waiting).name) if waiting else None

    def _topic_verb(self, verb: str) -> Action:
        return act(verb, self.rng.choice(TOPICS))

    def _flush(self, world: BrokerWorld) -> Action:
        return self._topic_verb("flush")

    def _fail_flush(self, world: BrokerWorld) -> Action:
        return self._topic_verb("fail-flush")

    def _fail_append(self, world: BrokerWorld) -> Action:
        return self._topic_verb("fail-append")

    def _sync(self, world: BrokerWorld) -> Action:
        return self._topic_verb("sync")

    def _fail_sync(self, world: BrokerWorld) -> Action:
        return act("fail-sync", self.rng.choice(TOPICS), self.rng.randint(0, 1))

    def _complete(self, world: BrokerWorld) -> Action | None:
        waiting = [t for t in TOPICS if world.storage.completions.get(full_name(t))]
        return act("complete", self.rng.choice(waiting)) if waiting else None

    def _cursors(self, world: BrokerWorld) -> Action:
        return act("cursors")

    def _fail_cursors(self, world: BrokerWorld) -> Action:
        return act("fail-cursors")

    def _crash(self, world: BrokerWorld) -> Action:
        return act("crash")

    def _tick(self, world: BrokerWorld) -> Action:
        return act("tick", self.rng.choice((1, 5, 30, 200, 1000, 4000)))

    def _reconnect(self, world: BrokerWorld) -> Action:
        return act("reconnect", f"n{self.rng.randrange(3)}")

    def _connected(self, world: BrokerWorld) -> list[ClientConsumer]:
        return [c for c in world.consumers.values() if c.connected]

    def _subscribe(self, world: BrokerWorld) -> Action | None:
        if len(world.consumers) >= self.options.max_consumers + len(TOPICS):
            return None
        topic = self.rng.choice(TOPICS)
        return self._new_consumer(topic, self.rng.choice(self.subs[topic]))

    def _close(self, world: BrokerWorld) -> Action | None:
        connected = self._connected(world)
        return act("close", self.rng.choice(connected).name) if connected else None

    def _receive(self, world: BrokerWorld) -> Action | None:
        waiting = [c for c in self._connected(world) if c.inbox]
        if not waiting:
            return None
        consumer = self.rng.choice(waiting)
        return act("receive", consumer.name, self.rng.randint(1, len(consumer.inbox)))

    def _some(self, consumer: ClientConsumer) -> str:
        n = len(consumer.received)
        return format_indexes(sorted(self.rng.sample(range(n), self.rng.randint(1, n))))

    def _ack(self, world: BrokerWorld) -> Action | None:
        holding = [c for c in self._connected(world) if c.received]
        if not holding:
            return None
        consumer = self.rng.choice(holding)
        return act("ack", consumer.name, self._some(consumer))

    def _ack_cum(self, world: BrokerWorld) -> Action | None:
        holding = [c for c in self._connected(world) if c.received and c.sub_type in (EXCLUSIVE, FAILOVER)]
        if not holding:
            return None
        consumer = self.rng.choice(holding)
        return act("ack-cum", consumer.name, self.rng.randrange(len(consumer.received)))

    def _nack(self, world: BrokerWorld) -> Action | None:
        holding = [c for c in self._connected(world) if c.received]
        if not holding:
            return None
        consumer = self.rng.choice(holding)
        return act("nack", consumer.name, self._some(consumer))

    def _redeliver(self, world: BrokerWorld) -> Action | None:
        connected = self._connected(world)
        return act("redeliver", self.rng.choice(connected).name) if connected else None

    def _seek(self, world: BrokerWorld) -> Action | None:
        connected = self._connected(world)
        if not connected:
            return None
        consumer = self.rng.choice(connected)
        entries = sorted(world.checker.topics[full_name(consumer.topic)].entries)
        if not entries or self.rng.random() < 0.3:
            return act("seek", consumer.name, "earliest")
        pos = self.rng.choice(entries)
        return act("seek", consumer.name, f"{pos.ledger_id}:{pos.entry_id}")


def run(seed: int, steps: int | None = None, schedule: list[Action] | None = None) -> BrokerRunResult:
    """The seed's schedule (or ``schedule`` under the seed's options), then liveness."""
    world_options, options = ScheduleOptions.from_seed(seed, steps)
    result = BrokerRunResult(seed, world_options)
    world = BrokerWorld(world_options)
    trace = hashlib.sha256()
    result.phase = "safety"
    try:
        if schedule is None:
            generator = BrokerScheduleGenerator(options, seed)
            for action in generator.setup():
                _step(world, result, action, trace)
            for _ in range(options.steps):
                proposed = generator.next_action(world)
                if proposed is not None:
                    _step(world, result, proposed, trace)
        else:
            for action in schedule:
                _step(world, result, action, trace)
        result.phase = "liveness"
        result.liveness_from = len(result.steps)
        _liveness(world, result, options, trace)
    except BrokerViolation as exc:
        result.violation = str(exc)
        result.failed_step = len(result.steps) - 1
    except Exception as exc:  # the system under test raised: a violation as well
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.violation = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
        result.failed_step = len(result.steps) - 1
    result.digest = trace.hexdigest()
    checker = world.checker
    result.figures = {
        "steps": len(result.steps), "sends": world.sends, "receipts": checker.receipts,
        "deliveries": checker.deliveries, "acks": checker.acks, "delayed_delivered": checker.delayed_delivered,
        "crashes": world.crashes, "unloads": world.unloads, "take_backs": world.take_backs,
        "send_errors": world.errors, "seeks": world.seeks, "refused_subscribes": world.refused, **checker.checks,
    }
    return result


def _step(world: BrokerWorld, result: BrokerRunResult, action: Action, trace: Hash) -> None:
    result.steps.append(action)
    if not world.apply(action):
        result.steps.pop()
        return
    trace.update(f"{action}|{world.checker.deliveries}|{world.checker.receipts}|{world.now_ms}\n".encode())


def _liveness(world: BrokerWorld, result: BrokerRunResult, options: ScheduleOptions, trace: Hash) -> None:
    """Faults off: producers resend, storage writes, syncs and reports everything, a
    consumer serves every subscription and acknowledges all it gets, time passes."""
    def step(verb: str, *args: object) -> None:
        _step(world, result, act(verb, *args), trace)

    names = iter(range(10_000))
    for _ in range(LIVENESS_ROUNDS_MAX):
        for producer in list(world.producers.values()):
            if not producer.connected or (producer.outstanding and producer.broken):
                step("resend", producer.name)
        for topic in TOPICS:
            ledger = world.gateway.topic(full_name(topic)).ledger
            assert isinstance(ledger, SimLedger)
            if ledger.unflushed_from is not None:
                step("flush", topic)
            if ledger.written_unsynced():
                step("sync", topic)
            while world.storage.completions.get(full_name(topic)):
                step("complete", topic)
        for topic, subs in options.subs:
            for sub in subs:
                if not any(c.connected and c.topic == topic and c.sub == sub for c in world.consumers.values()):
                    step("subscribe", "n0", f"live{next(names)}", topic, sub, 50)
        for consumer in list(world.consumers.values()):
            if not consumer.connected:
                continue
            if consumer.inbox:
                step("receive", consumer.name, len(consumer.inbox))
            if consumer.received:
                step("ack", consumer.name, format_indexes(list(range(len(consumer.received)))))
        if _drained(world):
            break
        step("tick", _liveness_tick(world))
    step("cursors")
    stuck = [f"{p.name} ({sorted(p.outstanding)[:3]})" for p in world.producers.values() if p.outstanding]
    if stuck:
        raise BrokerViolation(f"sends never answered once faults stopped: {', '.join(stuck)}")
    world.checker.check_end(world.backlogs())


def _liveness_tick(world: BrokerWorld) -> int:
    """How far to move time when a round left something undone: to the next delivery time
    of a stored delayed message, else a little (the broker's timers fire on the way)."""
    now = world.now_ms
    due = [m.deliver_at for t in world.checker.topics.values() for m in t.entries.values()
           if m.deliver_at is not None and m.deliver_at > now]
    return max(1, min(due) - now) if due else 100


def _drained(world: BrokerWorld) -> bool:
    if any(p.outstanding for p in world.producers.values()):
        return False
    if any(c.inbox or c.received for c in world.consumers.values()):
        return False
    return not any(world.backlogs().values())


# -- shrinking --------------------------------------------------------------------------
def shrink(result: BrokerRunResult, budget: int = 300) -> BrokerRunResult:
    """Remove steps while the schedule still fails (chunks, then single steps); the result
    holds the shortest failing schedule found (its liveness phase follows by itself)."""
    best = result
    steps = _failing_prefix(result)
    tries = 0
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and tries < budget:
        i = 0
        while i < len(steps) and tries < budget:
            tries += 1
            attempt = run(result.seed, schedule=steps[:i] + steps[i + chunk:])
            if attempt.ok:
                i += chunk
            else:
                best, steps = attempt, _failing_prefix(attempt)
        chunk //= 2
    if best is result:
        return result
    shrunk = BrokerRunResult(best.seed, best.world_options, steps=steps, violation=best.violation,
                             phase=best.phase, digest=best.digest, figures=best.figures)
    shrunk.failed_step = len(steps) - 1 if best.phase == "safety" else None
    return shrunk


def _failing_prefix(result: BrokerRunResult) -> list[Action]:
    """The steps a replay needs: up to the failing one, or (failed in liveness) the safety
    steps, after which liveness runs again by itself."""
    if result.phase == "safety" and result.failed_step is not None:
        return result.steps[: result.failed_step + 1]
    return result.steps[: result.liveness_from]


# -- command line -------------------------------------------------------------------------
def _run_one(args: tuple[int, int | None]) -> BrokerRunResult:
    return run(*args)


def _results(first: int, count: int, steps: int | None, jobs: int,
             deadline: float | None = None) -> Iterator[BrokerRunResult]:
    """Each seed's result in seed order; stops early (between batches) once ``deadline``
    (monotonic seconds) has passed."""
    batch = 1 if jobs <= 1 else jobs * 64
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    try:
        for start in range(first, first + count, batch):
            if deadline is not None and time.monotonic() >= deadline:
                return
            work = [(seed, steps) for seed in range(start, min(start + batch, first + count))]
            yield from (pool.map(_run_one, work, chunksize=32) if pool is not None else map(_run_one, work))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.testing.sim broker", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="first seed (random when omitted)")
    parser.add_argument("--schedules", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--steps", type=int, default=None, help="safety steps per schedule (default: from seed)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--schedule", type=Path, default=None, help="replay a printed schedule under --seed's options")
    parser.add_argument("--minutes", type=float, default=None,
                        help="stop starting schedules after this long (--schedules is then the most)")
    parser.add_argument("--no-shrink", action="store_true", help="print failing schedules as they ran")
    parser.add_argument("--verbose", action="store_true", help="print every schedule")
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.jobs < 1 or (args.steps is not None and args.steps < 0) \
            or (args.minutes is not None and args.minutes <= 0):
        parser.error("--schedules and --jobs must be at least 1, --steps not negative, --minutes positive")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}", flush=True)
    if args.schedule is not None:
        try:
            schedule = parse_broker_schedule(args.schedule.read_text())
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        result = run(seed, schedule=schedule)
        _report(result, shrink_it=False)
        return 0 if result.ok else 1
    started = time.monotonic()
    failures = ran = 0
    cpu = _cpu_seconds()
    totals: dict[str, int] = {}
    deadline = started + args.minutes * 60 if args.minutes is not None else None
    for result in _results(seed, args.schedules, args.steps, args.jobs, deadline):
        ran += 1
        for key, value in result.figures.items():
            totals[key] = totals.get(key, 0) + value
        if not result.ok:
            failures += 1
            _report(result, shrink_it=not args.no_shrink)
        elif args.verbose:
            _report(result, shrink_it=False)
    summary = {"first_seed": seed, "schedules": ran, "violations": failures,
               "seconds": round(time.monotonic() - started, 1), "cpu_seconds": round(_cpu_seconds() - cpu, 1),
               **totals}
    print(json.dumps(summary), flush=True)
    return 0 if failures == 0 else 1


def _cpu_seconds() -> float:
    """CPU time of this process and its finished workers (a shared machine's wall clock
    says little about what the schedules cost)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _report(result: BrokerRunResult, shrink_it: bool) -> None:
    status = "ok" if result.ok else f"VIOLATION ({result.phase}) at step {result.failed_step}: {result.violation}"
    print(f"seed {result.seed}: {status}")
    shown = shrink(result) if shrink_it and not result.ok else result
    if shown is not result:
        print(f"# shrunk from {len(result.steps)} to {len(shown.steps)} steps: {shown.violation}")
    print(shown.schedule_text())
    print(f"# replay: save the steps above to FILE, then python -m magnetar.testing.sim broker "
          f"--seed {result.seed} --schedule FILE", flush=True)


if __name__ == "__main__":
    sys.exit(main())
