"""Dedup snapshots, inactive producers and recovery (magnetar.core.dedup).

Covers regressions P4 (#22479, snapshot cadence) and P5 (#8237, time-based snapshots
on quiet topics) and Pulsar's testInactiveProducerRemove.
"""

from __future__ import annotations

from magnetar.core.dedup import (
    DEDUPLICATION_CURSOR_NAME,
    DeduplicationConfig,
    DedupOutcome,
    DedupSnapshot,
    MessageDeduplication,
)
from magnetar.core.dedup.dedup_snapshot import select_producers
from magnetar.core.positions import Position

MINUTE_MS = 60_000


def enabled(config: DeduplicationConfig | None = None, now_ms: int = 0) -> MessageDeduplication:
    dedup = MessageDeduplication(config)
    dedup.set_enabled(True)
    dedup.begin_recovery({}, Position(0, -1))
    dedup.finish_recovery(now_ms)
    return dedup


class Log:
    """A ledger and a dedup cursor, as the shell would keep them."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, int, Position]] = []
        self.cursor = DedupSnapshot(Position(0, -1), {})

    def publish(self, dedup: MessageDeduplication, producer: str, first: int, last: int, now_ms: int) -> bool:
        if dedup.check(producer, first, last, now_ms) is not DedupOutcome.NOT_DUP:
            return False
        position = Position(0, len(self.entries))
        self.entries.append((producer, last, position))
        dedup.on_persisted(producer, last, position, now_ms)
        return True

    def store_due_snapshot(self, dedup: MessageDeduplication, now_ms: int) -> DedupSnapshot | None:
        snapshot = dedup.maybe_snapshot(now_ms)
        if snapshot is not None:
            self.cursor = snapshot
            dedup.on_snapshot_stored(snapshot, now_ms)
        return snapshot

    def recover(self, config: DeduplicationConfig | None, now_ms: int) -> tuple[MessageDeduplication, int]:
        dedup = MessageDeduplication(config)
        dedup.set_enabled(True)
        dedup.begin_recovery(dict(self.cursor.properties), self.cursor.position)
        replayed = 0
        for producer, last, position in self.entries:
            if position > self.cursor.position:
                dedup.replay_entry(producer, last, position)
                replayed += 1
        dedup.finish_recovery(now_ms)
        return dedup, replayed


def test_cursor_name_is_pulsars() -> None:
    assert DEDUPLICATION_CURSOR_NAME == "pulsar.dedup"


# -- timing --------------------------------------------------------------------------


def test_snapshot_every_entries_interval_persisted_entries() -> None:
    config = DeduplicationConfig(entries_interval=3, snapshot_interval_s=0)
    dedup, log = enabled(config), Log()
    taken = []
    for seq in range(10):
        log.publish(dedup, "p", seq, seq, 0)
        snapshot = log.store_due_snapshot(dedup, 0)
        if snapshot is not None:
            taken.append((seq, snapshot))
    assert [seq for seq, _ in taken] == [2, 5, 8]
    assert taken[0][1] == DedupSnapshot(Position(0, 2), {"p": 2})
    assert dedup.stats().entries_since_snapshot == 1


def test_default_cadence_is_1000_entries() -> None:
    dedup, log = enabled(DeduplicationConfig(snapshot_interval_s=0)), Log()
    for seq in range(999):
        log.publish(dedup, "p", seq, seq, 0)
    assert dedup.maybe_snapshot(0) is None
    log.publish(dedup, "p", 999, 999, 0)
    assert log.store_due_snapshot(dedup, 0) == DedupSnapshot(Position(0, 999), {"p": 999})


def test_reg_p4_entry_snapshot_waits_for_the_one_in_flight_and_is_not_lost() -> None:
    dedup, log = enabled(DeduplicationConfig(entries_interval=2, snapshot_interval_s=0)), Log()
    log.publish(dedup, "p", 0, 0, 0)
    log.publish(dedup, "p", 1, 1, 0)
    first = dedup.maybe_snapshot(0)
    assert first is not None
    log.publish(dedup, "p", 2, 2, 0)
    log.publish(dedup, "p", 3, 3, 0)
    assert dedup.maybe_snapshot(0) is None  # one at a time
    dedup.on_snapshot_stored(first, 0)
    second = dedup.maybe_snapshot(0)
    assert second == DedupSnapshot(Position(0, 3), {"p": 3})


def test_failed_snapshot_is_retried() -> None:
    dedup, log = enabled(DeduplicationConfig(entries_interval=1, snapshot_interval_s=0)), Log()
    log.publish(dedup, "p", 0, 0, 0)
    snapshot = dedup.maybe_snapshot(0)
    assert snapshot is not None
    dedup.on_snapshot_failed(snapshot)
    assert dedup.stats().snapshot_position == Position(0, -1)  # still the recovery's start
    assert dedup.maybe_snapshot(0) == snapshot


def test_reg_p5_time_based_snapshot_on_a_quiet_topic() -> None:
    dedup, log = enabled(DeduplicationConfig()), Log()
    log.publish(dedup, "p", 0, 0, 1_000)
    # Never snapshotted: the first check snapshots what is there (Pulsar's timestamp starts at 0).
    first = log.store_due_snapshot(dedup, 1_000)
    assert first == DedupSnapshot(Position(0, 0), {"p": 0})
    assert dedup.next_snapshot_deadline_ms() is None  # nothing new since
    log.publish(dedup, "p", 1, 1, 2_000)
    assert dedup.next_snapshot_deadline_ms() == 121_000
    assert dedup.maybe_snapshot(120_999) is None
    second = log.store_due_snapshot(dedup, 121_000)
    assert second == DedupSnapshot(Position(0, 1), {"p": 1})
    assert dedup.stats().last_snapshot_ms == 121_000
    assert dedup.maybe_snapshot(10**9) is None  # nothing after the snapshot position


def test_time_based_snapshots_can_be_turned_off() -> None:
    dedup, log = enabled(DeduplicationConfig(snapshot_interval_s=0)), Log()
    log.publish(dedup, "p", 0, 0, 0)
    assert dedup.next_snapshot_deadline_ms() is None
    assert dedup.maybe_snapshot(10**12) is None


def test_stale_snapshot_reports_are_ignored() -> None:
    dedup, log = enabled(DeduplicationConfig(entries_interval=1)), Log()
    log.publish(dedup, "p", 0, 0, 0)
    snapshot = dedup.maybe_snapshot(0)
    assert snapshot is not None
    dedup.set_enabled(False)
    dedup.on_snapshot_stored(snapshot, 5)
    dedup.on_snapshot_failed(snapshot)
    assert dedup.stats().snapshot_position is None


# -- max producers -------------------------------------------------------------------------


def test_snapshot_holds_at_most_max_producers_most_recent_first() -> None:
    dedup, log = enabled(DeduplicationConfig(entries_interval=10**6, max_number_of_producers=3)), Log()
    for i in range(5):
        log.publish(dedup, f"p{i}", 0, 0, now_ms=i)
    snapshot = dedup.maybe_snapshot(0)
    assert snapshot is not None
    assert snapshot.properties == {"p2": 0, "p3": 0, "p4": 0}
    assert list(snapshot.properties) == sorted(snapshot.properties)
    assert dedup.stats().producers_left_out_of_last_snapshot == 2
    assert len(dedup.highest_sequenced_persisted) == 5  # memory keeps them all


def test_snapshot_at_exactly_max_producers_leaves_none_out() -> None:
    persisted = {f"p{i}": i for i in range(4)}
    assert select_producers(persisted, {}, 4) == persisted
    assert len(select_producers(persisted, {}, 3)) == 3
    assert select_producers(persisted, {}, 0) == {}


# -- inactive producers --------------------------------------------------------------------


def test_inactive_producers_are_purged_but_connected_ones_kept() -> None:
    config = DeduplicationConfig(producer_inactivity_timeout_minutes=360)
    dedup, log = enabled(config), Log()
    log.publish(dedup, "gone", 0, 0, 0)
    log.publish(dedup, "connected", 0, 0, 0)
    log.publish(dedup, "recent", 0, 0, 300 * MINUTE_MS)
    timeout_ms = 360 * MINUTE_MS
    assert dedup.purge_inactive_producers(timeout_ms, {"connected"}) == []  # not strictly older
    assert dedup.purge_inactive_producers(timeout_ms + 1, {"connected"}) == ["gone"]
    assert set(dedup.highest_sequenced_persisted) == {"connected", "recent"}
    assert dedup.check("gone", 0, 0, timeout_ms + 1) is DedupOutcome.NOT_DUP  # forgotten
    later = timeout_ms + 301 * MINUTE_MS
    assert dedup.purge_inactive_producers(later, {"connected"}) == ["recent"]


def test_a_producer_seen_connected_counts_as_active_from_then() -> None:
    dedup, log = enabled(DeduplicationConfig(producer_inactivity_timeout_minutes=1)), Log()
    log.publish(dedup, "p", 0, 0, 0)
    assert dedup.purge_inactive_producers(10 * MINUTE_MS, ["p"]) == []
    assert dedup.purge_inactive_producers(11 * MINUTE_MS, []) == []
    assert dedup.purge_inactive_producers(11 * MINUTE_MS + 1, []) == ["p"]


def test_producer_with_a_write_in_flight_is_never_purged() -> None:
    dedup = enabled(DeduplicationConfig(producer_inactivity_timeout_minutes=0))
    dedup.check("p", 0, 0, 0)
    assert dedup.purge_inactive_producers(10**9, []) == []
    dedup.on_persisted("p", 0, Position(0, 0), 0)
    assert dedup.purge_inactive_producers(10**9, []) == ["p"]


def test_purge_makes_a_snapshot_due_so_purged_producers_stay_gone() -> None:
    config = DeduplicationConfig(snapshot_interval_s=0, producer_inactivity_timeout_minutes=1)
    dedup, log = enabled(config), Log()
    log.publish(dedup, "old", 0, 0, 0)
    log.publish(dedup, "new", 0, 0, 5 * MINUTE_MS)
    assert dedup.maybe_snapshot(5 * MINUTE_MS) is None
    dedup.purge_inactive_producers(5 * MINUTE_MS, [])
    snapshot = log.store_due_snapshot(dedup, 5 * MINUTE_MS)
    assert snapshot == DedupSnapshot(Position(0, 1), {"new": 0})


def test_recovered_producers_age_from_the_recovery() -> None:
    dedup = MessageDeduplication(DeduplicationConfig(producer_inactivity_timeout_minutes=1))
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 4}, Position(0, 9))
    dedup.finish_recovery(1_000_000)
    assert dedup.purge_inactive_producers(1_000_000 + MINUTE_MS, []) == []
    assert dedup.purge_inactive_producers(1_000_001 + MINUTE_MS, []) == ["p"]


# -- recovery ----------------------------------------------------------------------------


def test_recovery_from_snapshot_and_replay_equals_state_before_crash() -> None:
    config = DeduplicationConfig(entries_interval=7, snapshot_interval_s=0)
    dedup, log = enabled(config), Log()
    for i in range(40):
        producer = f"p{i % 3}"
        first = dedup.last_sequence_id(producer) + 1
        log.publish(dedup, producer, first, first + i % 4, 0)
        log.store_due_snapshot(dedup, 0)
    assert log.cursor.position == Position(0, 34)
    before = (dedup.highest_sequenced_pushed, dedup.highest_sequenced_persisted)

    recovered, replayed = log.recover(config, 0)
    assert replayed == 5
    assert (recovered.highest_sequenced_pushed, recovered.highest_sequenced_persisted) == before
    for producer, last, _ in log.entries:
        assert recovered.check(producer, last, last, 0) is DedupOutcome.DUP


def test_replay_without_any_snapshot_rebuilds_everything() -> None:
    dedup, log = enabled(DeduplicationConfig(snapshot_interval_s=0)), Log()
    for seq in range(5):
        log.publish(dedup, "p", seq * 2, seq * 2 + 1, 0)
    recovered, replayed = log.recover(None, 0)
    assert replayed == 5
    assert recovered.last_sequence_id("p") == 9
    assert recovered.highest_sequenced_persisted == {"p": 9}


def test_long_replay_makes_a_snapshot_due_at_its_last_entry() -> None:
    config = DeduplicationConfig(entries_interval=3, snapshot_interval_s=0)
    dedup = MessageDeduplication(config)
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 1}, Position(0, 1))
    for entry in range(2, 6):
        dedup.replay_entry("p", entry, Position(0, entry))
    dedup.finish_recovery(0)
    assert dedup.maybe_snapshot(0) == DedupSnapshot(Position(0, 5), {"p": 5})


def test_short_replay_does_not_snapshot() -> None:
    dedup = MessageDeduplication(DeduplicationConfig(entries_interval=3, snapshot_interval_s=0))
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 1}, Position(0, 1))
    dedup.replay_entry("p", 2, Position(0, 2))
    dedup.finish_recovery(0)
    assert dedup.maybe_snapshot(0) is None
    assert dedup.stats().entries_since_snapshot == 1


def test_replay_skips_chunks_before_the_last() -> None:
    # The last chunk of seq 4 never reached the log: the retried message must be stored.
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 3}, Position(0, 0))
    dedup.replay_entry("p", 4, Position(0, 1), is_last_chunk=False)
    dedup.replay_entry("p", 4, Position(0, 2), is_last_chunk=False)
    dedup.finish_recovery(0)
    assert dedup.last_sequence_id("p") == 3
    assert dedup.check("p", 4, 4, 0) is DedupOutcome.NOT_DUP


def test_replay_keeps_the_highest_id_per_producer() -> None:
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 10, "bad": -1}, Position(0, 0))
    dedup.replay_entry("p", 8, Position(0, 1))
    dedup.finish_recovery(0)
    assert dedup.highest_sequenced_persisted == {"p": 10}


def test_snapshot_taken_while_writes_are_in_flight_is_consistent() -> None:
    config = DeduplicationConfig(entries_interval=1, snapshot_interval_s=0)
    dedup, log = enabled(config), Log()
    log.publish(dedup, "p", 0, 0, 0)
    assert dedup.check("p", 1, 1, 0) is DedupOutcome.NOT_DUP  # in flight, then the broker dies
    log.store_due_snapshot(dedup, 0)
    assert log.cursor == DedupSnapshot(Position(0, 0), {"p": 0})
    log.entries.append(("p", 1, Position(0, 1)))  # it did reach the disk
    recovered, _ = log.recover(config, 0)
    assert recovered.check("p", 1, 1, 0) is DedupOutcome.DUP
