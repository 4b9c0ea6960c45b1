"""One simulated run: a safety phase, then a liveness phase.

Safety: the seed's schedule runs with every fault on (crashes, stalls, nacks, ack
holes, joins that must be refused); after every step the checkers' verdicts stand and
the broker's view of what is outstanding must equal the clients'. Liveness: faults
stop, every application receives and acknowledges everything, missing STICKY ranges
are claimed, timers fire; the backlog must drain to zero.
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass, field
from typing import Any

from magnetar.core.dispatchers.key_shared_classic import KeySharedClassicDispatcher
from magnetar.testing.sim.actions import Action, act, format_ranges, parse_schedule
from magnetar.testing.sim.checkers import (
    CLASSIC_CONTRACT,
    OUT_OF_ORDER_CONTRACT,
    PIP_379_CONTRACT,
    SHARED_CONTRACT,
    SINGLE_ACTIVE_CONTRACT,
    Contract,
    ContractChecker,
    Violation,
)
from magnetar.testing.sim.generator import ScheduleGenerator, free_slots
from magnetar.testing.sim.options import ALL_TYPES, SHARED, SimOptions
from magnetar.testing.sim.world import World, draining_hashes, replay_size

LIVENESS_ROUNDS_MAX = 2_000
OPTIONS_PREFIX = "# options "
LIVENESS_MARKER = "# liveness: faults off, everyone receives and acknowledges"


def read_schedule_file(text: str) -> tuple[SimOptions | None, list[Action]]:
    """A printed schedule: its options (if recorded) and its safety steps (up to the liveness marker)."""
    options = None
    for line in text.splitlines():
        if line.startswith(OPTIONS_PREFIX):
            options = SimOptions.from_json(line[len(OPTIONS_PREFIX):])
    safety = text.split(LIVENESS_MARKER, 1)[0]
    return options, parse_schedule(safety)


@dataclass
class RunResult:
    options: SimOptions
    steps: list[Action] = field(default_factory=list)
    #: index in ``steps`` where the liveness phase starts (None: it did not)
    liveness_from: int | None = None
    #: deliveries after each step, when traced
    events: list[list[str]] | None = None
    violation: str | None = None
    failed_step: int | None = None
    published: int = 0
    deliveries: int = 0
    refused: int = 0
    trace_digest: str = ""
    #: how often the run was in the states that matter (coverage, not verdicts)
    coverage: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def schedule_text(self) -> str:
        """The run as a schedule file: options, safety steps, then (commented) the liveness steps."""
        lines = [f"# seed {self.options.seed}: {self.options.describe()}", f"{OPTIONS_PREFIX}{self.options.to_json()}"]
        for i, step in enumerate(self.steps):
            if i == self.liveness_from:
                lines.append(LIVENESS_MARKER)
            marker = "   # <- violation" if i == self.failed_step else ""
            lines.append(f"{step}{marker}")
            if self.events is not None and i < len(self.events):
                lines.extend(f"#{e}" for e in self.events[i])
        return "\n".join(lines)


def contract_of(options: SimOptions) -> Contract:
    if options.single_active:
        return SINGLE_ACTIVE_CONTRACT
    if options.sub_type == SHARED:
        return SHARED_CONTRACT
    if options.allow_out_of_order:
        return OUT_OF_ORDER_CONTRACT
    return CLASSIC_CONTRACT if options.classic else PIP_379_CONTRACT


def run(seed: int, steps: int | None = None, schedule: list[Action] | None = None,
        trace_events: bool = False, overrides: dict[str, str] | None = None,
        options: SimOptions | None = None, types: tuple[tuple[str, float], ...] = ALL_TYPES) -> RunResult:
    """Run the seed's schedule (or ``schedule``, under the seed's options or ``options``) and both
    phases; ``types`` is the mix the seed draws its subscription type from."""
    options = options or SimOptions.from_seed(seed, steps, types)
    if overrides:
        options = options.with_overrides(overrides)
    result = RunResult(options)
    world = World(options, ContractChecker(contract_of(options)))
    if trace_events:
        world.events = []
        result.events = []
    trace = hashlib.sha256()
    try:
        _safety(world, result, schedule, trace)
        result.liveness_from = len(result.steps)
        _liveness(world, result, trace)
    except Violation as exc:
        result.violation = str(exc)
        result.failed_step = len(result.steps) - 1
    except Exception as exc:  # the system under test raised: report it like a violation
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.violation = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
        result.failed_step = len(result.steps) - 1
    trace.update(world.trace.digest())
    result.trace_digest = trace.hexdigest()
    result.published = world.published_total
    result.deliveries = world.checker.deliveries
    result.refused = world.refused
    result.coverage["redeliveries"] = world.checker.redeliveries
    result.coverage["refused_subscribes"] = world.refused
    result.coverage["seeks"] = world.checker.seeks
    result.coverage["reader_deliveries"] = sum(r.received for r in world.readers_seen)
    result.coverage[f"runs_{options.sub_type}"] = 1
    return result


def _step(world: World, result: RunResult, action: Action, trace: Any) -> None:
    result.steps.append(action)
    applied = False
    try:
        applied = world.apply(action)
    finally:
        if world.events is not None and result.events is not None and applied is not None:
            result.events.append(world.events[:])
            world.events.clear()
    if not applied:
        result.steps.pop()
        if result.events:
            result.events.pop()
        return
    trace.update(f"{action}|{world.checker.deliveries}|{world.now_ms}\n".encode())
    check_agreement(world)
    _note_coverage(world, result)


def _note_coverage(world: World, result: RunResult) -> None:
    dispatcher = world.dispatcher
    if dispatcher is None:
        return
    seen = result.coverage
    if draining_hashes(dispatcher) is not None:
        seen["steps_with_draining_hashes"] = seen.get("steps_with_draining_hashes", 0) + 1
    if isinstance(dispatcher, KeySharedClassicDispatcher):
        if len(dispatcher.recently_joined):
            seen["steps_with_recently_joined"] = seen.get("steps_with_recently_joined", 0) + 1
        if dispatcher.sent_before_joining:
            seen["steps_held_by_entries_sent_beyond"] = seen.get("steps_held_by_entries_sent_beyond", 0) + 1
    if replay_size(dispatcher):
        seen["steps_with_replay"] = seen.get("steps_with_replay", 0) + 1


def _safety(world: World, result: RunResult, schedule: list[Action] | None, trace: Any) -> None:
    if schedule is not None:
        for step in schedule:
            _step(world, result, step, trace)
        return
    generator = ScheduleGenerator(world.options)
    for _ in range(world.options.steps):
        action = generator.next_action(world)
        if action is not None:
            _step(world, result, action, trace)


def _liveness(world: World, result: RunResult, trace: Any) -> None:
    for client in world.connected():
        if client.behavior != "normal":
            _step(world, result, act("behave", client.name, "normal"), trace)
    _ensure_consumers(world, result, trace)
    _step(world, result, act("persist"), trace)
    for _ in range(LIVENESS_ROUNDS_MAX):
        before = world.progress()
        for client in world.connected():
            if client.inbox:
                _step(world, result, act("receive", client.name, len(client.inbox)), trace)
            if client.received:
                _step(world, result, act("ack", client.name, ",".join(map(str, range(len(client.received))))), trace)
        for reader in list(world.readers.values()):
            if reader.inbox:
                _step(world, result, act("reader-receive", reader.name, len(reader.inbox)), trace)
        if world.drained():
            break
        deadline = world.next_deadline_ms()
        if deadline is not None:
            _step(world, result, act("tick", max(1, deadline - world.now_ms)), trace)
            continue
        if world.progress() == before:
            break
    world.checker.check_drained()
    check_drained_system(world)
    check_readers_caught_up(world)


def _ensure_consumers(world: World, result: RunResult, trace: Any) -> None:
    queue = max(world.options.queue_sizes)
    if world.options.sticky:
        for i, slot in enumerate(free_slots(world)):
            _step(world, result, act("join", f"live{i}", queue, format_ranges([slot])), trace)
    elif not world.connected():
        _step(world, result, act("join", "live0", queue), trace)


def check_agreement(world: World) -> None:
    """After every step: the broker and the clients agree on what is outstanding where (bar
    consumed entries the broker has not dropped yet),
    and each draining hash counts exactly its consumer's pending entries of that hash."""
    for client in world.connected():
        assert client.core is not None
        entries = world.checker.entries
        # entries consumed without an ack (message TTL) may stay pending until looked at
        broker = {p for p in client.core.pending if not entries[p].acked}
        clients = world.checker.outstanding.get(client.name, set())
        if broker != clients:
            only_broker = sorted(broker - clients)[:5]
            only_client = sorted(clients - broker)[:5]
            raise Violation(f"{client.name}: broker thinks {only_broker} pending, client holds {only_client}")
    tracker = draining_hashes(world.dispatcher)
    if tracker is None:
        return
    for client in world.connected():
        core = client.core
        assert core is not None, "a connected client has its broker-side consumer"
        counts: dict[int, int] = {}
        for entry in core.pending.values():
            counts[entry.sticky_hash] = counts.get(entry.sticky_hash, 0) + 1
        for draining in tracker.draining_hashes_of(core):
            if draining.unack_msgs != counts.get(draining.hash, 0):
                raise Violation(f"hash {draining.hash} draining at {client.name} counts {draining.unack_msgs} "
                                f"pending entries; {counts.get(draining.hash, 0)} are pending there")


def check_readers_caught_up(world: World) -> None:
    """Every reader still open was sent every entry from its start (the checks on arrival
    already hold them to order and to once each)."""
    last = world.topic.last_readable()
    for reader in world.readers.values():
        missing = reader.missing(last)
        if missing:
            raise Violation(f"reader {reader.name} was never sent {len(missing)} entries, first {missing[0]}")


def check_drained_system(world: World) -> None:
    sub = world.sub
    if sub is None:
        return
    backlog = sub.backlog()
    if backlog:
        raise Violation(f"stuck: the subscription's backlog is {backlog} after everything was acknowledged")
    dispatcher = world.dispatcher
    if replay_size(dispatcher):
        raise Violation(f"stuck: {replay_size(dispatcher)} entries left in the replay queue")
    tracker = draining_hashes(dispatcher)
    if tracker is not None:
        raise Violation(f"stuck: {len(tracker)} hashes still draining with nothing pending")
