"""Property: whatever the sequence of publishes, ticks, pops, acks and restarts, every delayed
message is delivered exactly once, never before its time, and no later than its time plus
one tick. Faults (storage failures) are on in a safety phase, then off for a liveness phase.

The model is the dispatcher and cursor around the tracker: it reads each message as it is
published (``add_message``; False means deliver now), arms one timer at
``next_delivery_time_ms`` and drains due messages when it fires, acknowledges what it
delivers (mark-delete follows the acknowledged prefix), and on restart re-reads every
unacknowledged message from the log, as a cursor does after recovery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from magnetar.core.delayed.bucket_delayed_delivery_tracker import (
    BucketDelayedDeliveryTracker,
    RecoverDelayedDeliveryTrackerError,
)
from magnetar.core.delayed.bucket_snapshot_storage import MemoryBucketSnapshotStorage
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.tracker import DelayedDeliveryTracker
from magnetar.core.positions import BEFORE_START, Position

FAULTY_OPERATIONS = ("create", "get_metadata", "get_segment", "get_length", "delete")


@dataclass(frozen=True)
class Config:
    bucketed: bool
    tick_time_ms: int
    strict: bool
    min_index_count_per_bucket: int
    time_step_ms: int
    max_indexes_per_segment: int
    max_num_buckets: int
    filter_acknowledged: bool


configs = st.builds(
    Config,
    bucketed=st.booleans(),
    tick_time_ms=st.sampled_from([0, 1, 7, 100]),
    strict=st.booleans(),
    min_index_count_per_bucket=st.integers(1, 4),
    time_step_ms=st.sampled_from([5, 20, 50, 500]),
    max_indexes_per_segment=st.sampled_from([-1, 1, 1, 2, 4]),
    max_num_buckets=st.sampled_from([-1, 1, 1, 2, 3]),
    filter_acknowledged=st.booleans(),
)

#: Bucket settings that seal, segment and merge as often as possible.
merging_configs = st.builds(
    Config,
    bucketed=st.just(True),
    tick_time_ms=st.sampled_from([0, 1, 7, 100]),
    strict=st.booleans(),
    min_index_count_per_bucket=st.integers(1, 2),
    time_step_ms=st.sampled_from([5, 20]),
    max_indexes_per_segment=st.sampled_from([1, 2]),
    max_num_buckets=st.sampled_from([1, 2]),
    filter_acknowledged=st.booleans(),
)

#: Operation weights out of 100.
_OPCODES = (
    ["publish"] * 36 + ["roll"] * 15 + ["tick"] * 18 + ["stall"] * 6 + ["pop"] * 10 + ["ack"] * 8 + ["restart"] * 7
)


def _operation(code: int, a: int, b: int) -> tuple[str, int, int]:
    op = _OPCODES[code]
    if op in ("tick", "stall"):
        return op, 1 + b % 600, 0
    return op, a, b


operations = st.lists(
    st.builds(_operation, st.integers(0, 99), st.integers(1, 8), st.integers(-50, 3000)),
    min_size=10,
    max_size=80,
)

faults = st.lists(
    st.tuples(st.integers(0, 49), st.sampled_from(FAULTY_OPERATIONS), st.integers(1, 5)),
    max_size=8,
)


class Harness:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.storage = MemoryBucketSnapshotStorage()
        self.properties: dict[str, int | str] = {}
        self.now = 0
        self.ledger, self.entry = 1, 0
        self.log: list[tuple[Position, int]] = []
        self.delivered: dict[Position, int] = {}
        self.returned_this_session: set[Position] = set()
        self.restarted = False
        self.faults_on = False
        self.stalled = False
        self.tracker: DelayedDeliveryTracker = self._new_tracker()

    # -- the system around the tracker ------------------------------------------------------

    def _new_tracker(self) -> DelayedDeliveryTracker:
        config = self.config
        if not config.bucketed:
            return InMemoryDelayedDeliveryTracker(
                tick_time_ms=config.tick_time_ms, is_delayed_delivery_deliver_at_time_strict=config.strict
            )
        tracker = BucketDelayedDeliveryTracker(
            self.storage,
            tick_time_ms=config.tick_time_ms,
            is_delayed_delivery_deliver_at_time_strict=config.strict,
            min_index_count_per_bucket=config.min_index_count_per_bucket,
            max_time_step_per_bucket_snapshot_segment_ms=config.time_step_ms,
            max_indexes_per_bucket_snapshot_segment=config.max_indexes_per_segment,
            max_num_buckets=config.max_num_buckets,
            is_acknowledged=self._is_acknowledged if config.filter_acknowledged else None,
        )
        try:
            tracker.recover(self.properties, self.now, self.mark_delete())
        except RecoverDelayedDeliveryTrackerError:
            assert self.faults_on, "recovery failed without a storage fault"
            # Pulsar's factory falls back to the in-memory tracker, which rebuilds by re-reading.
            return InMemoryDelayedDeliveryTracker(
                tick_time_ms=config.tick_time_ms, is_delayed_delivery_deliver_at_time_strict=config.strict
            )
        return tracker

    def _is_acknowledged(self, ledger_id: int, entry_id: int) -> bool:
        return Position(ledger_id, entry_id) in self.delivered

    def _apply_property_changes(self) -> None:
        if isinstance(self.tracker, BucketDelayedDeliveryTracker):
            for key, value in self.tracker.take_property_changes():
                if value is None:
                    del self.properties[key]
                else:
                    self.properties[key] = value

    def mark_delete(self) -> Position:
        mark = BEFORE_START
        for position, _ in self.log:
            if position not in self.delivered:
                break
            mark = position
        return mark

    def deliver(self, position: Position, deliver_at_ms: int) -> None:
        assert position not in self.delivered, f"{position} delivered twice"
        earliest = deliver_at_ms if self.config.strict else deliver_at_ms - self.config.tick_time_ms
        assert self.now >= earliest, f"{position} delivered at {self.now}, due {deliver_at_ms}"
        self.delivered[position] = self.now

    def read(self, position: Position, deliver_at_ms: int) -> None:
        if not self.tracker.add_message(position.ledger_id, position.entry_id, deliver_at_ms, self.now):
            self.deliver(position, deliver_at_ms)

    def take(self, max_messages: int) -> int:
        due_at = dict(self.log)
        got = self.tracker.get_scheduled_messages(max_messages, self.now)
        assert got == sorted(got)
        for position in got:
            assert position not in self.returned_this_session, f"{position} returned twice in a session"
            self.returned_this_session.add(position)
            if position in self.delivered:
                # Only after a restart, and only without the acknowledged filter: the
                # dispatcher skips what the cursor already deleted.
                assert self.restarted and not self.config.filter_acknowledged
                continue
            self.deliver(position, due_at[position])
        return len(got)

    def drain(self) -> None:
        while self.take(7):
            pass

    def assert_none_overdue(self) -> None:
        if self.faults_on or self.stalled:
            return
        for position, deliver_at in self.log:
            if position not in self.delivered:
                assert deliver_at + self.config.tick_time_ms >= self.now, f"{position} is late at {self.now}"

    # -- operations ---------------------------------------------------------------------

    def publish(self, count: int, delay_ms: int) -> None:
        for _ in range(count):
            position = Position(self.ledger, self.entry)
            self.entry += 1
            self.log.append((position, self.now + delay_ms))
            self.read(position, self.now + delay_ms)

    def roll(self) -> None:
        self.ledger, self.entry = self.ledger + 1, 0

    def tick(self, elapsed_ms: int) -> None:
        """Time passes; the shell's timer fires at each ``next_delivery_time_ms``."""
        target = self.now + elapsed_ms
        if self.stalled:
            self.drain()
            self.stalled = False
        while True:
            next_ms = self.tracker.next_delivery_time_ms()
            if next_ms is None or next_ms > target:
                break
            self.now = max(self.now, next_ms)
            self.assert_none_overdue()
            self.drain()
            after = self.tracker.next_delivery_time_ms()
            assert after is None or after > self.now, "the timer would spin"
        self.now = target
        self.assert_none_overdue()
        self.drain()

    def stall(self, elapsed_ms: int) -> None:
        """Time passes while no consumer has permits: nothing is drained, due messages pile up."""
        self.now += elapsed_ms
        self.stalled = True

    def ack(self) -> None:
        self.tracker.on_mark_delete(self.mark_delete())

    def restart(self) -> None:
        self.tracker.close()
        self.restarted = True
        self.returned_this_session = set()
        self.tracker = self._new_tracker()
        # The cursor re-reads everything after the mark-delete that is not acknowledged.
        for position, deliver_at in self.log:
            if position not in self.delivered:
                self.read(position, deliver_at)

    def run(self, op: str, a: int, b: int) -> None:
        if op == "publish":
            self.publish(a, b)
        elif op == "roll":
            self.roll()
        elif op == "tick":
            self.tick(a)
        elif op == "stall":
            self.stall(a)
        elif op == "pop":
            self.take(a)
        elif op == "ack":
            self.ack()
        elif op == "restart":
            self.restart()
        self._apply_property_changes()
        self.check_invariants()

    def check_invariants(self) -> None:
        tracker = self.tracker
        undelivered = [p for p, _ in self.log if p not in self.delivered]
        # Nothing is lost: every message not yet delivered is held by the tracker.
        for position in undelivered:
            assert tracker.contains_message(position.ledger_id, position.entry_id), f"{position} lost"
        if not self.restarted:
            assert tracker.number_of_delayed_messages == len(undelivered)
        else:
            assert tracker.number_of_delayed_messages >= len(undelivered)

    def finish(self) -> None:
        """Liveness: faults off, one more restart, time runs out; everything is delivered."""
        self.storage.clear_failures()
        self.restart()
        self.faults_on = False
        self.drain()
        self.stalled = False
        self._apply_property_changes()
        last = max((at for _, at in self.log), default=0)
        self.tick(max(last - self.now, 0) + self.config.tick_time_ms + 1)
        self._apply_property_changes()
        assert sorted(self.delivered) == sorted(p for p, _ in self.log)
        assert self.tracker.number_of_delayed_messages == 0
        if self.config.bucketed:
            # No snapshot or property leaks.
            assert self.storage.bucket_ids() == []
            assert self.properties == {}


def run_program(config: Config, program: list[tuple[str, int, int]], injected: list[Any]) -> None:
    harness = Harness(config)
    faults_at: dict[int, list[tuple[str, int]]] = {}
    for step, operation, times in injected:
        faults_at.setdefault(step, []).append((operation, times))
    harness.faults_on = bool(injected)
    for step, (op, a, b) in enumerate(program):
        for operation, times in faults_at.get(step, []):
            harness.storage.inject_failure(operation, times=times)
        harness.run(op, a, b)
    harness.finish()


@settings(max_examples=250, deadline=None)
@given(configs, operations)
# Restart while a loaded segment straddles "now": its due message goes out directly on
# re-read and must not come out of the tracker again.
@example(
    Config(True, 1, True, 1, 500, -1, -1, True),
    [("publish", 1, 1000), ("publish", 1, 1300), ("roll", 0, 0), ("publish", 1, 5000)]
    + [("stall", 1100, 0), ("restart", 0, 0), ("tick", 10, 0)],
)
def test_exactly_once_on_time_across_restarts(config: Config, program: list[tuple[str, int, int]]) -> None:
    run_program(config, program, [])


@settings(max_examples=200, deadline=None)
@given(merging_configs, operations)
def test_exactly_once_when_buckets_merge(config: Config, program: list[tuple[str, int, int]]) -> None:
    run_program(config, program, [])


@settings(max_examples=200, deadline=None)
@given(st.one_of(configs.filter(lambda c: c.bucketed), merging_configs), operations, faults)
def test_exactly_once_with_storage_faults(
    config: Config, program: list[tuple[str, int, int]], injected: list[tuple[int, str, int]]
) -> None:
    run_program(config, program, list(injected))
