"""DrainingHashesTracker: reference counts, blocking, lazy release, batched unblocking, stats, memory."""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass, field
from itertools import count

import pytest
from core_sinks import RecordingSink
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.key_shared.consistent_hashing import ConsistentHashingStickyKeyConsumerSelector
from magnetar.core.key_shared.consumer_hash_assignments_snapshot import ImpactedConsumers
from magnetar.core.key_shared.draining_hashes_tracker import (
    DrainingHash,
    DrainingHashEntry,
    DrainingHashesStats,
    DrainingHashesTracker,
)
from magnetar.core.positions import Position
from magnetar.core.subscriptions.consumer import Consumer

_ids = count(1)


@dataclass(eq=False)
class FakeConsumer:
    consumer_name: str
    consumer_id: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return self.consumer_name


C1, C2, C3 = FakeConsumer("c1"), FakeConsumer("c2"), FakeConsumer("c3")


def tracker(interval_ms: int = 10) -> tuple[DrainingHashesTracker[FakeConsumer], list[int]]:
    unblocked: list[int] = []
    return DrainingHashesTracker(interval_ms, unblocked.append), unblocked


def test_ref_counts_and_clearing() -> None:
    t, unblocked = tracker()
    t.add_entry(C1, 7)
    t.add_entry(C1, 7)
    t.add_entry(C1, 300)
    assert len(t) == 2 and 7 in t and 8 not in t
    assert t.get_entry(7) == DrainingHashEntry(C1, 2, 0)
    t.reduce_ref_count(C1, 7)
    assert t.get_entry(7) == DrainingHashEntry(C1, 1, 0)
    t.reduce_ref_count(C1, 7)
    assert t.get_entry(7) is None and len(t) == 1
    assert unblocked == []  # nobody was blocked by it
    assert t.consumer_stats(C1).draining_hashes_cleared_total == 1
    t.reduce_ref_count(C1, 9999)  # not draining: ignored


def test_blocking_other_consumers_counts_attempts_and_unblocks_when_drained() -> None:
    t, unblocked = tracker()
    t.add_entry(C1, 42)
    assert t.should_block_sticky_key_hash(C2, 42)
    assert t.should_block_sticky_key_hash(C3, 42)
    assert not t.should_block_sticky_key_hash(C2, 43)
    assert not t.should_block_sticky_key_hash(C2, 0)  # "not set" never blocks
    assert t.get_entry(42) == DrainingHashEntry(C1, 1, 2)
    t.reduce_ref_count(C1, 42)
    assert unblocked == [42] and t.unblock_pending


def test_a_hash_back_at_its_draining_consumer_is_released_lazily() -> None:
    t, unblocked = tracker()
    t.add_entry(C1, 42)
    t.add_entry(C1, 42)
    assert t.should_block_sticky_key_hash(C2, 42)
    assert not t.should_block_sticky_key_hash(C1, 42)
    assert 42 not in t
    assert unblocked == []  # a release, not an unblock
    assert t.consumer_stats(C1).draining_hashes_cleared_total == 1
    t.reduce_ref_count(C1, 42)  # later acks of the old pending messages are harmless
    assert 42 not in t


def test_closing_clears_without_unblocking() -> None:
    t, unblocked = tracker()
    t.add_entry(C1, 5)
    t.should_block_sticky_key_hash(C2, 5)
    t.reduce_ref_count(C1, 5, closing=True)
    assert 5 not in t and unblocked == [] and not t.unblock_pending


def test_unblocks_in_a_batch_are_reported_once_at_the_end() -> None:
    t, unblocked = tracker()
    for h in (1, 2, 3):
        t.add_entry(C1, h)
        t.should_block_sticky_key_hash(C2, h)
    t.start_batch()
    t.start_batch()
    t.reduce_ref_count(C1, 1)
    t.end_batch()
    t.reduce_ref_count(C1, 2)
    assert unblocked == [] and not t.unblock_pending
    t.end_batch()
    assert unblocked == [-1] and t.unblock_pending
    with pytest.raises(RuntimeError):
        t.end_batch()


def test_unblocking_is_coalesced_by_the_interval() -> None:
    t, _ = tracker(interval_ms=10)
    assert t.next_unblock_deadline_ms(now_ms=0) is None
    for h in (1, 2):
        t.add_entry(C1, h)
        t.should_block_sticky_key_hash(C2, h)
    t.reduce_ref_count(C1, 1)
    assert t.next_unblock_deadline_ms(now_ms=100) == 110
    t.reduce_ref_count(C1, 2)  # rides along with the armed deadline
    assert t.next_unblock_deadline_ms(now_ms=105) == 110
    assert not t.poll_unblocked(now_ms=109)
    assert t.poll_unblocked(now_ms=110)
    assert not t.poll_unblocked(now_ms=111)
    assert t.next_unblock_deadline_ms(now_ms=200) is None


def test_zero_interval_unblocks_at_once() -> None:
    t, _ = tracker(interval_ms=0)
    t.add_entry(C1, 1)
    t.should_block_sticky_key_hash(C2, 1)
    t.reduce_ref_count(C1, 1)
    assert t.poll_unblocked(now_ms=5)


def test_one_hash_drains_at_one_consumer_only() -> None:
    t, _ = tracker()
    t.add_entry(C1, 9)
    with pytest.raises(RuntimeError):
        t.add_entry(C2, 9)
    with pytest.raises(RuntimeError):
        t.reduce_ref_count(C2, 9)
    with pytest.raises(ValueError):
        t.add_entry(C1, 0)
    with pytest.raises(ValueError):
        t.add_entry(C1, 65536)


def test_adding_a_pending_ack_of_a_draining_hash() -> None:
    t, _ = tracker()
    t.add_entry(C1, 9)
    assert not t.handle_adding_pending_ack(C2, 9)
    # a message picked for C1 before the hash moved away still drains with the others
    assert t.handle_adding_pending_ack(C1, 9)
    assert t.get_entry(9) == DrainingHashEntry(C1, 2, 0)
    assert t.handle_adding_pending_ack(C2, 10)


def test_registering_the_same_pending_messages_twice_does_not_double_count() -> None:
    t, _ = tracker()
    t.register_pending_hashes(C1, [5, 5, 6])
    t.register_pending_hashes(C1, [5, 5, 6])
    assert t.get_entry(5) == DrainingHashEntry(C1, 2, 0)
    for h in (5, 5, 6):
        t.reduce_ref_count(C1, h)
    assert len(t) == 0


def test_a_hash_that_moves_away_comes_back_and_moves_away_again_still_drains() -> None:
    """Consistent hashing churn: c3 joins, leaves, rejoins while c1 sits on pending messages.

    Registering c1's pending messages on each move away (as Pulsar's dispatcher does with
    ``addEntry``) would count them twice and block the hash forever after c1 acks.
    """
    selector = ConsistentHashingStickyKeyConsumerSelector[Consumer]()
    t: DrainingHashesTracker[Consumer] = DrainingHashesTracker(10, [].append)
    c1 = pending_consumer("c1", t)
    selector.add_consumer(c1)
    joiner = Consumer(99, "joiner", RecordingSink())
    impacted = selector.add_consumer(joiner)
    assert impacted is not None
    moved = next(r.start for r in impacted[c1])
    deliver(c1, Position(1, 1), moved)
    deliver(c1, Position(1, 2), moved)

    def register(impacted: ImpactedConsumers[Consumer] | None) -> None:
        assert impacted is not None
        removed = impacted.get(c1)
        if removed is not None:
            t.register_pending_hashes(c1, (e.sticky_hash for e in c1.pending.values() if e.sticky_hash in removed))

    # the hash had no pending message when it first moved; now c1 holds two and the joiner
    # leaves (the hash comes back to c1) and rejoins (it moves away again), twice
    for _ in range(2):
        selector.remove_consumer(joiner)
        joiner = Consumer(99, "joiner", RecordingSink())
        register(selector.add_consumer(joiner))
    assert t.get_entry(moved) == DrainingHashEntry(c1, 2, 0)
    assert t.should_block_sticky_key_hash(joiner, moved)
    c1.remove_pending(Position(1, 1))
    c1.remove_pending(Position(1, 2))
    assert not t.should_block_sticky_key_hash(joiner, moved)


def pending_consumer(name: str, t: DrainingHashesTracker[Consumer]) -> Consumer:
    """A consumer whose pending entries release their hashes, as the Key_Shared dispatcher
    wires it (``Consumer.on_pending_removed``)."""
    consumer = Consumer(len(name), name, RecordingSink())
    consumer.on_pending_removed = lambda c, entry, closing: t.reduce_ref_count(c, entry.sticky_hash, closing)
    return consumer


def deliver(consumer: Consumer, pos: Position, sticky_hash: int) -> None:
    consumer.deliver(pos, -1, b"x", 1, 0, None, 0, sticky_hash)


def test_a_leaving_consumer_drains_through_its_pending_entries() -> None:
    unblocked: list[int] = []
    t: DrainingHashesTracker[Consumer] = DrainingHashesTracker(10, unblocked.append)
    c1, c2 = pending_consumer("c1", t), pending_consumer("c2", t)
    for entry, h in enumerate([11, 11, 12]):
        assert t.handle_adding_pending_ack(c1, h)
        deliver(c1, Position(1, entry), h)
    t.register_pending_hashes(c1, [e.sticky_hash for e in c1.pending.values()])
    assert t.should_block_sticky_key_hash(c2, 11)
    replay = c1.take_all_pending()
    assert len(t) == 0 and len(replay) == 3
    assert unblocked == []  # closing: the dispatcher reads anyway after removing a consumer
    t.consumer_removed(c1)
    assert t.consumer_stats(c1) == DrainingHashesStats()


def test_consumer_removed_releases_leftovers_and_recycles_its_slot() -> None:
    t, unblocked = tracker()
    t.add_entry(C1, 100)
    t.consumer_removed(C1)
    assert 100 not in t and unblocked == [100]
    t.add_entry(C2, 100)  # the slot is reused without confusion
    assert t.get_entry(100) == DrainingHashEntry(C2, 1, 0)
    t.consumer_removed(C3)  # unknown: nothing happens


def test_stats_shapes() -> None:
    t, _ = tracker()
    for h, n in ((2862, 2), (11707, 1)):
        for _ in range(n):
            t.add_entry(C1, h)
    for _ in range(5):
        t.should_block_sticky_key_hash(C2, 2862)
    t.add_entry(C2, 7)
    t.add_entry(C2, 8)
    t.reduce_ref_count(C2, 8)
    stats = t.consumer_stats(C1)
    assert stats.to_json() == {
        "drainingHashesCount": 2,
        "drainingHashesClearedTotal": 0,
        "drainingHashesUnackedMessages": 3,
        "drainingHashes": [
            {"hash": 2862, "unackMsgs": 2, "blockedAttempts": 5},
            {"hash": 11707, "unackMsgs": 1, "blockedAttempts": 0},
        ],
    }
    assert list(t.draining_hashes_of(C2)) == [DrainingHash(7, 1, 0)]
    assert t.subscription_stats() == DrainingHashesStats(3, 1, 4)
    assert t.subscription_stats().to_json(with_hashes=False) == {
        "drainingHashesCount": 3,
        "drainingHashesClearedTotal": 1,
        "drainingHashesUnackedMessages": 4,
    }
    assert t.consumer_stats(C3).to_json()["drainingHashes"] == []


@dataclass
class ModelEntry:
    consumer: FakeConsumer
    refs: int = 1
    blocked: int = 0


OPS = st.sampled_from(["add", "reduce", "block", "close"])


@given(st.lists(st.tuples(OPS, st.integers(0, 2), st.integers(1, 600)), max_size=80))
def test_matches_a_dict_model(ops: list[tuple[str, int, int]]) -> None:
    consumers = [C1, C2, C3]
    t, _ = tracker()
    model: dict[int, ModelEntry] = {}
    for op, ci, h in ops:
        c = consumers[ci]
        entry = model.get(h)
        if op == "add":
            if entry is not None and entry.consumer is not c:
                with pytest.raises(RuntimeError):
                    t.add_entry(c, h)
                continue
            t.add_entry(c, h)
            if entry is None:
                model[h] = ModelEntry(c)
            else:
                entry.refs += 1
        elif op in ("reduce", "close"):
            if entry is not None and entry.consumer is not c:
                with pytest.raises(RuntimeError):
                    t.reduce_ref_count(c, h, closing=op == "close")
                continue
            t.reduce_ref_count(c, h, closing=op == "close")
            if entry is not None:
                entry.refs -= 1
                if entry.refs == 0:
                    del model[h]
        else:
            blocked = t.should_block_sticky_key_hash(c, h)
            assert blocked == (entry is not None and entry.consumer is not c)
            if entry is not None:
                if entry.consumer is c:
                    del model[h]
                else:
                    entry.blocked += 1
        assert len(t) == len(model)
        for mh, e in model.items():
            assert t.get_entry(mh) == DrainingHashEntry(e.consumer, e.refs, e.blocked)
    for c in consumers:
        stats = t.consumer_stats(c)
        assert stats.draining_hashes_count == sum(1 for e in model.values() if e.consumer is c)


def test_all_65535_hashes_draining_stay_far_under_10_mb() -> None:
    consumers = [FakeConsumer(f"m{i}") for i in range(8)]
    gc.collect()
    tracemalloc.start()
    try:
        t: DrainingHashesTracker[FakeConsumer] = DrainingHashesTracker()
        for h in range(1, 65536):
            t.add_entry(consumers[h % 8], h)
            t.add_entry(consumers[h % 8], h)
        for h in range(1, 65536, 3):
            t.should_block_sticky_key_hash(consumers[(h + 1) % 8], h)
        current, peak = tracemalloc.get_traced_memory()
        assert len(t) == 65535
        assert peak < 2 * 1024 * 1024, peak
        for h in range(1, 65536):
            t.reduce_ref_count(consumers[h % 8], h)
            t.reduce_ref_count(consumers[h % 8], h)
        assert len(t) == 0
        drained, _ = tracemalloc.get_traced_memory()
        assert drained < 64 * 1024, drained  # pages are freed once their hashes drain
    finally:
        tracemalloc.stop()
