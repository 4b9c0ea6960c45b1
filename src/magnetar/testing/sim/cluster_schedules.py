"""Cluster schedules: one seed gives the cluster (two or three brokers, producers, topics,
the session timeout, each broker's clock rate) and every step. A run checks the promises of
:mod:`~magnetar.testing.sim.cluster_checkers` after every step while faults are on
(safety); then faults stop, every broker resumes and reconnects, and every producer must get
all its messages acknowledged and every lookup must lead to one owner (liveness).

    python -m magnetar.testing.sim cluster --seed 1 --schedules 10000
    python -m magnetar.testing.sim cluster --scenario pulsar-24478

``--set skip_session_check=true`` (or ``skip_takeover_wait``) plants a broken rule, to see
the checkers catch it.
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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from magnetar.core.cluster.bundle_ownership import BundleState
from magnetar.core.cluster.metadata_paths import bundle_ownership_path
from magnetar.core.cluster.namespace_ephemeral_data import NamespaceEphemeralData
from magnetar.testing.sim.cluster_broker import Options
from magnetar.testing.sim.cluster_checkers import ClusterViolation
from magnetar.testing.sim.cluster_world import NAMESPACE, ClusterWorld, SimProducer, WorldSetup

TOPICS = tuple(f"persistent://{NAMESPACE}/t{i}" for i in range(4))
LIVENESS_ROUNDS_MAX = 600
LIVENESS_MESSAGES = 2
#: liveness rounds a producer waits for a receipt before it sends again (its send timeout)
SEND_TIMEOUT_ROUNDS = 12
Step = tuple[str, str]
#: the faults that last, and the action that ends each
ENDING = {"pause": "resume", "cut": "heal", "store-down": "store-up"}


@dataclass(frozen=True)
class ClusterOptions:
    seed: int
    setup: WorldSetup
    steps: int
    weights: tuple[tuple[str, float], ...]

    @classmethod
    def from_seed(cls, seed: int, steps: int | None = None, overrides: dict[str, str] | None = None) -> ClusterOptions:
        rng = random.Random(f"cluster-options-{seed}")
        timeout = rng.choice((300, 1000, 3000))
        brokers = rng.choice((2, 3, 3))
        options = Options(session_timeout_ms=timeout, margin_ms=timeout // 10,
                          entries_per_ledger=rng.choice((2, 5, 1000)))
        for key, text in (overrides or {}).items():
            options = replace(options, **{key: _parse(getattr(options, key), text)})  # type: ignore[arg-type]
        setup = WorldSetup(
            brokers=brokers, producers=rng.randint(2, 4), topics=TOPICS[:rng.randint(1, 2)], options=options,
            # monotonic clocks that run up to 1 % apart (the margin covers 5 %)
            clock_rates=tuple(1 + rng.choice((0.0, 0.0, -0.01, 0.01)) for _ in range(brokers)),
            progress_while_ticking=rng.choice((0.0, 0.5, 0.9)))
        faults = rng.choice((0.3, 1.0, 2.0))
        weights = {"deliver": 12.0, "process": 12.0, "file": 6.0, "publish": 5.0, "tick": 10.0, "reconnect": 4.0,
                   "pause": 0.4 * faults, "resume": 0.5, "cut": 0.3 * faults, "heal": 0.5, "kill": 0.15 * faults,
                   "restart": 0.5, "store-down": 0.1 * faults, "store-up": 1.0, "unload": 0.3 * faults,
                   "drop-owner": 0.05 * faults,
                   "timeout": 1.5}
        return cls(seed, setup, steps if steps is not None else rng.randint(80, 240), tuple(weights.items()))


def _parse(current: object, text: str) -> object:
    if isinstance(current, bool):
        return text.lower() in ("1", "true", "yes")
    if isinstance(current, int):
        return int(text)
    raise ValueError(f"option cannot be set from the command line: {text}")


@dataclass
class ClusterRunResult:
    seed: int
    steps: list[Step] = field(default_factory=list)
    violation: str | None = None
    phase: str = ""
    digest: str = ""
    figures: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def schedule_text(self) -> str:
        return "\n".join(f"{a} {b}".strip() for a, b in self.steps)


class _Run:
    def __init__(self, options: ClusterOptions) -> None:
        self.options = options
        self.world = ClusterWorld(options.setup, options.seed)
        self.rng = random.Random(f"cluster-steps-{options.seed}")
        self.result = ClusterRunResult(options.seed)
        self.trace = hashlib.sha256()
        #: per producer, its unanswered messages and for how many rounds they have been so
        self.waiting: dict[str, tuple[frozenset[str], int]] = {}

    def step(self, action: str, arg: str) -> None:
        self.result.steps.append((action, arg))
        self.world.apply(action, arg)
        self.trace.update(f"{action} {arg} {self.world.now_ms}\n".encode())

    def tick_size(self) -> int:
        timeout = self.options.setup.options.session_timeout_ms
        return self.rng.choice((1, timeout // 10, timeout // 4, timeout // 2, timeout))

    def safety(self) -> None:
        weights = dict(self.options.weights)
        #: when a fault may end: a pause or a cut lasts long enough to matter (often past
        #: the session timeout), a store restart a little less
        ends: dict[tuple[str, str], int] = {}
        for _ in range(self.options.steps):
            actions = [a for a in self.world.enabled() if ends.get(a, 0) <= self.world.now_ms]
            action, arg = self.rng.choices(actions, [weights.get(a, 1.0) for a, _ in actions])[0]
            if action == "tick":
                arg = str(self.tick_size())
            if action in ENDING:
                ends[(ENDING[action], arg)] = self.world.now_ms + self.fault_length(action)
            self.step(action, arg)

    def fault_length(self, action: str) -> int:
        timeout = self.options.setup.options.session_timeout_ms
        if action == "store-down":
            return self.rng.choice((1, timeout // 4, timeout))
        return self.rng.choice((1, timeout // 2, 2 * timeout, 4 * timeout, 8 * timeout))

    def calm(self) -> None:
        """Faults off: everyone resumes, links heal, the store is up, the killed restart."""
        w = self.world
        if not w.store.available:
            self.step("store-up", "")
        for b in w.live():
            if b.paused:
                self.step("resume", b.name)
            if not b.client.linked:
                self.step("heal", b.name)
        for name in sorted(w.killed):
            self.step("restart", name)

    def liveness(self) -> None:
        self.calm()
        w = self.world
        goals = {p.name: p.sent + LIVENESS_MESSAGES for p in w.producers.values()}
        interval = max(1, self.options.setup.options.session_timeout_ms // 6)
        for _ in range(LIVENESS_ROUNDS_MAX):
            if self._drained(goals):
                break
            self.round(goals)
            self.step("tick", str(interval))
        else:
            raise ClusterViolation(f"stuck: producers did not get every message acknowledged "
                                   f"({_unacked(w)} unacknowledged)")
        check_lookups_converge(w)
        w.checker.check_final()

    def round(self, goals: dict[str, int]) -> None:
        w = self.world
        for b in w.live():
            if b.client.current_session_id() is None and not b.paused and w.reachable(b):
                self.step("reconnect", b.name)
            while b.outbound:
                self.step("deliver", b.name)
            while b.file_ops:
                self.step("file", b.name)
            while b.inbound and not b.paused:
                self.step("process", b.name)
        for p in w.producers.values():
            waited = self.waiting.get(p.name, (frozenset(), 0))
            self.waiting[p.name] = (frozenset(p.inflight), waited[1] + 1 if waited[0] == p.inflight else 0)
            if p.inflight and self.waiting[p.name][1] >= SEND_TIMEOUT_ROUNDS:
                self.step("timeout", p.name)  # its send timeout: the messages go again
            if p.to_send or p.sent < goals[p.name] or p.broker is None:
                self.step("publish", p.name)

    def _drained(self, goals: dict[str, int]) -> bool:
        return all(not p.inflight and not p.to_send and p.sent >= goals[p.name]
                   for p in self.world.producers.values())


def _unacked(world: ClusterWorld) -> int:
    return sum(len(p.inflight) + len(p.to_send) for p in world.producers.values())


def check_lookups_converge(world: ClusterWorld) -> None:
    """Through every broker, each topic's lookup ends at the one broker the store names."""
    for topic in world.setup.topics:
        bundle = world.bundles.find_bundle(topic)
        node = world.store.read(bundle_ownership_path(bundle))
        if node is None:
            continue  # nobody asked for it since its owner left
        owner = NamespaceEphemeralData.from_json(node.value).broker_id
        if world.brokers[owner].ownership.state(bundle) is not BundleState.OWNED:
            raise ClusterViolation(f"the store names {owner} owner of {bundle}, which does not know it")
        for broker in world.answering():
            reached = world.follow(topic, broker, acquire=False)
            if reached != owner:
                raise ClusterViolation(f"a lookup of {topic} through {broker.name} ends at {reached}, "
                                       f"not at its owner {owner}")


def run(seed: int, steps: int | None = None, overrides: dict[str, str] | None = None,
        scenario: str | None = None) -> ClusterRunResult:
    """One schedule: the seed's own, or a named scenario's steps (then liveness either way)."""
    options = ClusterOptions.from_seed(seed, steps, overrides)
    if scenario is not None:
        options = SCENARIOS[scenario][0](options)
    current = _Run(options)
    result = current.result
    try:
        result.phase = "safety"
        (SCENARIOS[scenario][1] if scenario else _Run.safety)(current)
        result.phase = "liveness"
        current.liveness()
    except ClusterViolation as exc:
        result.violation = str(exc)
    except Exception as exc:  # the system under test raised: a violation too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.violation = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
    result.figures = dict(current.world.figures)
    result.digest = current.trace.hexdigest()
    return result


# -- named scenarios --------------------------------------------------------------------------


def _two_brokers_one_topic(options: ClusterOptions) -> ClusterOptions:
    setup = replace(options.setup, brokers=2, producers=1, topics=TOPICS[:1], clock_rates=(1.0, 1.0),
                    options=replace(options.setup.options, entries_per_ledger=1000))
    return replace(options, setup=setup)


def _settle(r: _Run, until: Callable[[], bool], rounds: int = 200) -> None:
    w = r.world
    goals = {p.name: p.sent + 1 for p in w.producers.values()}
    interval = max(1, r.options.setup.options.session_timeout_ms // 6)
    for _ in range(rounds):
        if until():
            return
        r.round(goals)
        goals = {p.name: max(goals[p.name], p.sent + (1 if not p.inflight else 0)) for p in w.producers.values()}
        r.step("tick", str(interval))
    raise ClusterViolation("the scenario did not reach the state it waits for")


def pulsar_24478(r: _Run) -> None:
    """apache/pulsar #24478: the metadata store restarts; the owner of a topic does not come
    back within its session (here: paused through the restart and past the timeout) while
    an append of its is fsynced and waiting for its receipt; the other broker takes the
    topic over. The old owner, resumed, must acknowledge nothing and stop serving: one
    broker serves the topic, and every acknowledged entry is kept."""
    w = r.world
    producer = w.producers["p0"]
    _settle(r, lambda: len(producer.acked) >= 3)
    owner = producer.broker
    assert owner is not None
    r.step("publish", "p0")  # one more append on the owner: its receipt is pending
    r.step("store-down", "")
    r.step("pause", owner)
    while w.brokers[owner].file_ops:
        r.step("file", owner)  # the fsync completes while the owner is stopped
    r.step("tick", str(r.options.setup.options.session_timeout_ms // 2))
    r.step("store-up", "")

    def taken_over() -> bool:
        if producer.broker == owner:
            r.step("timeout", "p0")
        return producer.broker not in (None, owner) and not producer.inflight and not producer.to_send
    _settle(r, taken_over)
    w.count("scenario_taken_over")
    r.step("resume", owner)


def _owner_stopped_with_an_fsynced_append(r: _Run) -> tuple[ClusterWorld, SimProducer, str]:
    """The owner of p0's topic stopped with an append fsynced and its receipt not yet sent."""
    w = r.world
    producer = w.producers["p0"]
    _settle(r, lambda: len(producer.acked) >= 2)
    owner = producer.broker
    assert owner is not None
    r.step("publish", "p0")
    r.step("pause", owner)
    while w.brokers[owner].file_ops:
        r.step("file", owner)
    return w, producer, owner


def owner_node_dropped(r: _Run) -> None:
    """The owner's ownership node is removed while its session lives (by hand, or by a
    store restored without it) and the owner is stopped with an fsynced append waiting for
    its receipt. The owner, resumed within its lease, may still acknowledge it; the broker
    that took the bundle must not have closed the ledger before that lease ran out: this is
    what the successor's wait is for."""
    w, producer, owner = _owner_stopped_with_an_fsynced_append(r)
    r.step("drop-owner", bundle_ownership_path(w.bundles.find_bundle(producer.topic)))
    r.step("timeout", "p0")
    successor = next(name for name in sorted(w.brokers) if name != owner)
    r.step("acquire", f"{successor} {producer.topic}")
    started = w.now_ms
    _settle(r, lambda: w.now_ms - started >= r.options.setup.options.session_timeout_ms // 2)
    r.step("resume", owner)


def store_restored_without_sessions(r: _Run) -> None:
    """The store comes back without its sessions (restored from a backup) while the owner,
    stopped with an fsynced append waiting for its receipt, is cut off from it. Every
    session ended at once, so the owner's lease may still run when it resumes. The broker
    that takes the bundle over sees the owner's session ended, but its own session is new
    too: it must wait the lease out all the same (the check of its own session's age)."""
    w, producer, owner = _owner_stopped_with_an_fsynced_append(r)
    r.step("cut", owner)
    r.step("store-down", "")
    r.step("store-up", "sessions-lost")
    r.step("timeout", "p0")
    successor = next(name for name in sorted(w.brokers) if name != owner)
    _settle(r, lambda: w.brokers[successor].lease.session_id is not None)
    r.step("acquire", f"{successor} {producer.topic}")
    started = w.now_ms
    # resumed once the successor serves the topic (at the latest two timeouts on)
    _settle(r, lambda: producer.topic in w.brokers[successor].writers
            or w.now_ms - started >= 2 * r.options.setup.options.session_timeout_ms)
    r.step("resume", owner)


SCENARIOS: dict[str, tuple[Callable[[ClusterOptions], ClusterOptions], Callable[[_Run], None]]] = {
    "pulsar-24478": (_two_brokers_one_topic, pulsar_24478),
    "owner-node-dropped": (_two_brokers_one_topic, owner_node_dropped),
    "store-restored-without-sessions": (_two_brokers_one_topic, store_restored_without_sessions),
}


# -- command line -----------------------------------------------------------------------------


def _run_one(args: tuple[int, int | None, dict[str, str], str | None]) -> ClusterRunResult:
    return run(*args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.testing.sim cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="first seed (random when omitted)")
    parser.add_argument("--schedules", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--steps", type=int, default=None, help="safety steps per schedule (default: from seed)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default=None, help="a named scenario")
    parser.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE",
                        help="force a broker option, e.g. skip_session_check=true")
    parser.add_argument("--verbose", action="store_true", help="print every schedule's steps")
    args = parser.parse_args(argv)
    if args.schedules < 1:
        parser.error("--schedules must be at least 1")
    try:
        overrides = dict(item.split("=", 1) for item in args.set)
        ClusterOptions.from_seed(0, None, overrides)
    except (ValueError, TypeError, AttributeError) as exc:
        parser.error(f"--set: {exc}")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}" + "".join(f" --set {item}" for item in args.set), flush=True)
    started = time.monotonic()
    work = [(s, args.steps, overrides, args.scenario) for s in range(seed, seed + args.schedules)]
    failures = 0
    figures: dict[str, int] = {}
    for result in _results(work, args.jobs):
        for key, value in result.figures.items():
            figures[key] = figures.get(key, 0) + value
        if not result.ok:
            failures += 1
            print(f"seed {result.seed}: VIOLATION ({result.phase}): {result.violation}", flush=True)
        if args.verbose or not result.ok:
            print(result.schedule_text(), flush=True)
    print(json.dumps({"first_seed": seed, "schedules": args.schedules, "violations": failures, "figures": figures,
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0 if failures == 0 else 1


def _results(work: list[tuple[int, int | None, dict[str, str], str | None]], jobs: int) -> Iterator[ClusterRunResult]:
    if jobs <= 1:
        yield from map(_run_one, work)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(_run_one, work, chunksize=64)


if __name__ == "__main__":
    sys.exit(main())
