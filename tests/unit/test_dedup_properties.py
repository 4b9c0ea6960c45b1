"""Random interleavings of sends, retries, persists, failed writes, snapshots and crashes.

Pulsar has no long randomized dedup-under-fault test (its loop test is disabled),
so this one drives MessageDeduplication through a model of a topic: writes are
stored in order, may fail, and a crash keeps any prefix of the writes in flight.
Invariants checked after every step:

* no sequence id of a producer is stored twice, counting writes in flight;
* every stored message, retried alone, is answered ``DUP``;
* pushed never falls below persisted;
* after a crash, the recovered state is the state before it plus the writes that
  reached the disk.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from magnetar.core.dedup import DeduplicationConfig, DedupOutcome, DedupSnapshot, MessageDeduplication
from magnetar.core.positions import Position

PRODUCERS = ("a", "b")


@dataclass
class Entry:
    producer: str
    first: int
    last: int
    position: Position | None = None


@dataclass
class Client:
    next_sequence_id: int = 0
    sent: list[tuple[int, int]] = field(default_factory=list)
    #: Batches without a receipt yet, in send order: what a client resends on reconnect.
    unacked: dict[tuple[int, int], None] = field(default_factory=dict)


class DedupTopicMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now_ms = 0
        self.log: list[Entry] = []
        self.in_flight: list[Entry] = []
        self.clients = {name: Client() for name in PRODUCERS}
        self.cursor = DedupSnapshot(Position(0, -1), {})
        self.config = DeduplicationConfig()
        self.dedup = MessageDeduplication()
        self.outcomes: Counter[DedupOutcome] = Counter()

    @initialize(
        entries_interval=st.integers(0, 6),
        snapshot_interval_s=st.integers(0, 3),
    )
    def start(self, entries_interval: int, snapshot_interval_s: int) -> None:
        self.config = DeduplicationConfig(
            entries_interval=entries_interval,
            snapshot_interval_s=snapshot_interval_s,
            max_number_of_producers=len(PRODUCERS),
            producer_inactivity_timeout_minutes=0,
        )
        self.dedup = self.recover()

    def recover(self, run_length: int = 1) -> MessageDeduplication:
        """Replay one entry at a time and, as the broker does, folded into runs; both must agree."""
        replayed = [e for e in self.log if e.position is not None and e.position > self.cursor.position]
        one_by_one, folded = MessageDeduplication(self.config), MessageDeduplication(self.config)
        for dedup in (one_by_one, folded):
            dedup.set_enabled(True)
            dedup.begin_recovery(dict(self.cursor.properties), self.cursor.position)
        for entry in replayed:
            assert entry.position is not None
            one_by_one.replay_entry(entry.producer, entry.last, entry.position)
        for start in range(0, len(replayed), run_length):
            run = replayed[start : start + run_length]
            highest: dict[str, int] = {}
            for entry in run:
                highest[entry.producer] = max(highest.get(entry.producer, -1), entry.last)
            assert run[-1].position is not None
            folded.replay_entries(highest, len(run), run[-1].position)
        for dedup in (one_by_one, folded):
            dedup.finish_recovery(self.now_ms)
        assert folded.stats() == one_by_one.stats()
        assert folded.highest_sequenced_pushed == one_by_one.highest_sequenced_pushed
        assert folded.next_snapshot_deadline_ms() == one_by_one.next_snapshot_deadline_ms()
        return folded

    def submit(self, producer: str, first: int, last: int) -> None:
        outcome = self.dedup.check(producer, first, last, self.now_ms)
        self.outcomes[outcome] += 1
        unacked = self.clients[producer].unacked
        if outcome is DedupOutcome.NOT_DUP:
            self.in_flight.append(Entry(producer, first, last))
            unacked[(first, last)] = None
        elif outcome is DedupOutcome.DUP:
            unacked.pop((first, last), None)

    def append_to_log(self, entry: Entry) -> Position:
        entry.position = Position(1, len(self.log))
        self.log.append(entry)
        return entry.position

    @rule(producer=st.sampled_from(PRODUCERS), size=st.integers(1, 4))
    def send_new(self, producer: str, size: int) -> None:
        client = self.clients[producer]
        first = client.next_sequence_id
        client.next_sequence_id += size
        client.sent.append((first, first + size - 1))
        self.submit(producer, first, first + size - 1)

    @rule(producer=st.sampled_from(PRODUCERS), data=st.data())
    def resend_batch(self, producer: str, data: st.DataObject) -> None:
        sent = self.clients[producer].sent
        if sent:
            first, last = data.draw(st.sampled_from(sent))
            self.submit(producer, first, last)

    @rule(producer=st.sampled_from(PRODUCERS))
    def reconnect_and_resend_unacked(self, producer: str) -> None:
        for first, last in list(self.clients[producer].unacked):
            self.submit(producer, first, last)

    @rule(producer=st.sampled_from(PRODUCERS), data=st.data())
    def resend_rebatched(self, producer: str, data: st.DataObject) -> None:
        highest = self.clients[producer].next_sequence_id - 1
        if highest >= 0:
            first = data.draw(st.integers(0, highest))
            last = data.draw(st.integers(first, highest))
            self.submit(producer, first, last)

    @precondition(lambda self: self.in_flight)
    @rule(count=st.integers(1, 3))
    def persist_oldest(self, count: int) -> None:
        for entry in self.in_flight[:count]:
            position = self.append_to_log(entry)
            self.clients[entry.producer].unacked.pop((entry.first, entry.last), None)
            self.dedup.on_persisted(entry.producer, entry.last, position, self.now_ms)
        del self.in_flight[:count]

    @precondition(lambda self: self.in_flight)
    @rule(resend=st.booleans())
    def fail_oldest(self, resend: bool) -> None:
        entry = self.in_flight.pop(0)
        self.dedup.on_write_failed(entry.producer)
        if resend:  # the error makes the client reconnect and resend what has no receipt
            self.reconnect_and_resend_unacked(entry.producer)

    @rule(elapsed_ms=st.integers(0, 2_000), stored=st.booleans())
    def snapshot(self, elapsed_ms: int, stored: bool) -> None:
        self.now_ms += elapsed_ms
        # The inactivity timeout is 0, but everyone is connected, so nobody is forgotten.
        assert self.dedup.purge_inactive_producers(self.now_ms + 1, PRODUCERS) == []
        snapshot = self.dedup.maybe_snapshot(self.now_ms)
        if snapshot is None:
            return
        assert self.log and self.log[-1].position is not None
        assert snapshot.position <= self.log[-1].position
        if stored:
            self.cursor = snapshot
            self.dedup.on_snapshot_stored(snapshot, self.now_ms)
        else:
            self.dedup.on_snapshot_failed(snapshot)

    @rule(data=st.data())
    def crash_and_recover(self, data: st.DataObject) -> None:
        reached_disk = data.draw(st.integers(0, len(self.in_flight)))
        expected = self.dedup.highest_sequenced_persisted
        for entry in self.in_flight[:reached_disk]:
            self.append_to_log(entry)
            expected[entry.producer] = max(expected.get(entry.producer, -1), entry.last)
        self.in_flight.clear()
        self.dedup = self.recover(data.draw(st.integers(1, 5), label="run_length"))
        assert self.dedup.highest_sequenced_persisted == expected
        assert self.dedup.highest_sequenced_pushed == expected

    @invariant()
    def stored_at_most_once(self) -> None:
        # Writes in flight count too: any of them may still reach the disk.
        for producer in PRODUCERS:
            writes = [e for e in self.log + self.in_flight if e.producer == producer]
            ids = [i for e in writes for i in range(e.first, e.last + 1)]
            assert len(ids) == len(set(ids)), f"{producer} stored twice: {sorted(ids)}"

    @invariant()
    def stored_messages_are_duplicates_on_retry(self) -> None:
        for entry in self.log:
            for sequence_id in range(entry.first, entry.last + 1):
                outcome = self.dedup.check(entry.producer, sequence_id, sequence_id, self.now_ms)
                assert outcome is DedupOutcome.DUP, (entry, sequence_id, outcome)

    @invariant()
    def pushed_never_below_persisted(self) -> None:
        pushed = self.dedup.highest_sequenced_pushed
        for producer, persisted in self.dedup.highest_sequenced_persisted.items():
            assert pushed[producer] >= persisted

    @invariant()
    def fenced_only_while_writes_are_in_flight(self) -> None:
        if not self.in_flight:
            assert not self.dedup.is_fenced
        assert self.dedup.stats().pending_writes == len(self.in_flight)


DedupTopicMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_dedup_topic_interleavings = DedupTopicMachine.TestCase


@pytest.mark.slow
def test_dedup_topic_interleavings_long_campaign() -> None:
    run_state_machine_as_test(
        DedupTopicMachine, settings=settings(max_examples=2_000, stateful_step_count=100, deadline=None)
    )
