"""Sequence-id deduplication rules (magnetar.core.dedup.message_deduplication).

Mirrors Pulsar's MessageDuplicationTest state machine, plus regressions P1 (#5218)
and P2 (#6273) from the reference list.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.core.dedup import (
    CONFIG_KEYS,
    DedupAction,
    DeduplicationConfig,
    DedupOutcome,
    DedupStateError,
    DedupStatus,
    MessageDeduplication,
    classify_send,
)
from magnetar.core.dedup.message_deduplication import TRANSITIONS
from magnetar.core.positions import Position

NOT_DUP, DUP, UNKNOWN, PARTIAL = (
    DedupOutcome.NOT_DUP,
    DedupOutcome.DUP,
    DedupOutcome.UNKNOWN,
    DedupOutcome.PARTIAL_DUP,
)


def enabled(config: DeduplicationConfig | None = None) -> MessageDeduplication:
    dedup = MessageDeduplication(config)
    assert dedup.set_enabled(True) is DedupAction.RECOVER
    dedup.begin_recovery({}, Position(0, -1))
    dedup.finish_recovery(0)
    return dedup


class Writer:
    """Sends through a MessageDeduplication and persists in order, like a topic would."""

    def __init__(self, dedup: MessageDeduplication) -> None:
        self.dedup = dedup
        self.entry_id = 0

    def send(self, producer: str, first: int, last: int | None = None, now_ms: int = 0) -> DedupOutcome:
        return self.dedup.check(producer, first, first if last is None else last, now_ms)

    def persist(self, producer: str, last: int, now_ms: int = 0) -> Position:
        position = Position(0, self.entry_id)
        self.entry_id += 1
        self.dedup.on_persisted(producer, last, position, now_ms)
        return position

    def publish(self, producer: str, first: int, last: int | None = None, now_ms: int = 0) -> DedupOutcome:
        outcome = self.send(producer, first, last, now_ms)
        if outcome is NOT_DUP:
            self.persist(producer, first if last is None else last, now_ms)
        return outcome


# -- classify_send: the table ------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "last", "pushed", "persisted", "expected"),
    [
        (0, 0, -1, -1, NOT_DUP),  # unknown producer
        (6, 6, 5, 5, NOT_DUP),  # above pushed
        (5, 5, 5, 5, DUP),  # at persisted
        (2, 2, 5, 5, DUP),  # below persisted
        (5, 5, 5, 3, UNKNOWN),  # pushed, not yet persisted
        (4, 4, 5, 3, UNKNOWN),
        (3, 3, 5, 3, DUP),
        (6, 9, 5, 5, NOT_DUP),  # batch above pushed
        (0, 4, 9, 9, DUP),  # batch wholly stored
        (5, 9, 9, 9, DUP),
        (3, 12, 9, 9, PARTIAL),  # stored + new in one batch (#6273)
        (9, 10, 9, 9, PARTIAL),
        (3, 8, 9, 5, UNKNOWN),  # tail still in flight
        (6, 12, 9, 5, UNKNOWN),  # head in flight
    ],
)
def test_classify_send_table(first: int, last: int, pushed: int, persisted: int, expected: DedupOutcome) -> None:
    assert classify_send(first, last, pushed, persisted) is expected


@given(
    seq=st.integers(0, 100),
    persisted=st.integers(-1, 100),
    extra=st.integers(0, 50),
)
def test_single_messages_follow_pulsar_exactly(seq: int, persisted: int, extra: int) -> None:
    pushed = persisted + extra
    if seq > pushed:
        expected = NOT_DUP
    elif seq <= persisted:
        expected = DUP
    else:
        expected = UNKNOWN
    assert classify_send(seq, seq, pushed, persisted) is expected


# -- publishing ----------------------------------------------------------------------


def test_new_message_records_pushed_and_persisted_separately() -> None:
    dedup = enabled()
    assert dedup.check("p", 0, 0, 0) is NOT_DUP
    assert dedup.highest_sequenced_pushed == {"p": 0}
    assert dedup.highest_sequenced_persisted == {}
    assert dedup.last_sequence_id("p") == 0
    dedup.on_persisted("p", 0, Position(0, 0), 0)
    assert dedup.highest_sequenced_persisted == {"p": 0}


def test_retry_while_in_flight_is_unknown_then_dup_once_persisted() -> None:
    dedup = enabled()
    assert dedup.check("p", 7, 7, 0) is NOT_DUP
    assert dedup.check("p", 7, 7, 0) is UNKNOWN
    dedup.on_persisted("p", 7, Position(0, 0), 0)
    assert dedup.check("p", 7, 7, 0) is DUP
    assert dedup.check("p", 3, 3, 0) is DUP
    stats = dedup.stats()
    assert (stats.duplicates_dropped, stats.unknown_rejected) == (2, 1)


def test_producers_are_independent() -> None:
    writer = Writer(enabled())
    assert writer.publish("a", 5) is NOT_DUP
    assert writer.publish("b", 0) is NOT_DUP
    assert writer.publish("b", 5) is NOT_DUP
    assert writer.publish("a", 5) is DUP
    assert writer.dedup.last_sequence_id("a") == 5
    assert writer.dedup.last_sequence_id("nobody") == -1


def test_sequence_ids_may_skip_but_not_go_back() -> None:
    writer = Writer(enabled())
    assert writer.publish("p", 10) is NOT_DUP
    assert writer.publish("p", 20) is NOT_DUP
    assert writer.publish("p", 15) is DUP


def test_batch_records_its_last_id() -> None:
    writer = Writer(enabled())
    assert writer.publish("p", 0, 9) is NOT_DUP
    assert writer.dedup.last_sequence_id("p") == 9
    assert writer.publish("p", 0, 9) is DUP  # the whole batch again
    assert writer.publish("p", 5, 5) is DUP  # one of its messages alone
    assert writer.publish("p", 10, 14) is NOT_DUP


def test_batch_without_highest_id_in_command_uses_resolved_last_id() -> None:
    # The caller resolves the last id from the payload when SEND has no highest_sequence_id.
    writer = Writer(enabled())
    assert writer.publish("p", 0, 4) is NOT_DUP
    assert writer.publish("p", 1, 1) is DUP


def test_last_id_lower_than_first_is_read_as_first() -> None:
    dedup = enabled()
    assert dedup.check("p", 5, 0, 0) is NOT_DUP
    assert dedup.last_sequence_id("p") == 5


def test_reg_p2_mixed_batch_is_rejected_not_dropped() -> None:
    writer = Writer(enabled())
    writer.publish("p", 0, 9)
    assert writer.publish("p", 5, 14) is PARTIAL
    assert writer.dedup.last_sequence_id("p") == 9  # nothing recorded
    assert writer.dedup.stats().partial_dup_rejected == 1
    assert writer.publish("p", 10, 14) is NOT_DUP  # re-batched without the stored part


def test_negative_sequence_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        enabled().check("p", -2, 0, 0)


# -- chunks ------------------------------------------------------------------------


def test_chunked_message_is_judged_on_its_last_chunk() -> None:
    dedup = enabled()
    for chunk in range(3):
        assert dedup.check("p", 4, 4, 0, is_last_chunk=False) is NOT_DUP
        dedup.on_persisted("p", 4, Position(0, chunk), 0, is_last_chunk=False)
    assert dedup.last_sequence_id("p") == -1
    assert dedup.highest_sequenced_persisted == {}
    assert dedup.check("p", 4, 4, 0) is NOT_DUP
    dedup.on_persisted("p", 4, Position(0, 3), 0)
    assert dedup.highest_sequenced_persisted == {"p": 4}
    # Earlier chunks are let through as in Pulsar; the last chunk is the duplicate.
    assert dedup.check("p", 4, 4, 0, is_last_chunk=False) is NOT_DUP
    dedup.on_persisted("p", 4, Position(0, 4), 0, is_last_chunk=False)
    assert dedup.check("p", 4, 4, 0) is DUP
    assert dedup.stats().entries_since_snapshot == 5


# -- failed writes (#5218) -----------------------------------------------------------


def test_reg_p1_retry_after_failed_write_is_stored() -> None:
    dedup = enabled()
    assert dedup.check("p", 0, 0, 0) is NOT_DUP
    dedup.on_persisted("p", 0, Position(0, 0), 0)
    assert dedup.check("p", 1, 1, 0) is NOT_DUP
    dedup.on_write_failed("p")
    assert dedup.last_sequence_id("p") == 0
    assert dedup.check("p", 1, 1, 0) is NOT_DUP
    dedup.on_persisted("p", 1, Position(0, 1), 0)
    assert dedup.check("p", 1, 1, 0) is DUP


def test_failed_write_resets_every_producer_like_pulsar() -> None:
    dedup = enabled()
    dedup.check("a", 0, 0, 0)
    dedup.on_persisted("a", 0, Position(0, 0), 0)
    dedup.check("b", 0, 0, 0)
    dedup.on_persisted("b", 0, Position(0, 1), 0)
    dedup.check("a", 1, 1, 0)
    dedup.check("b", 1, 1, 0)
    dedup.on_write_failed("a")
    dedup.on_write_failed("b")
    assert dedup.highest_sequenced_pushed == {"a": 0, "b": 0}


def test_reset_waits_for_writes_in_flight_and_fences_meanwhile() -> None:
    dedup = enabled()
    assert dedup.check("a", 0, 0, 0) is NOT_DUP
    assert dedup.check("b", 0, 0, 0) is NOT_DUP
    dedup.on_write_failed("a")
    assert dedup.is_fenced
    # b's write may still succeed: resetting now would let its retry in twice.
    assert dedup.last_sequence_id("b") == 0
    assert dedup.check("b", 0, 0, 0) is UNKNOWN
    assert dedup.check("c", 0, 0, 0) is UNKNOWN  # nothing new while fenced
    assert dedup.check("a", 0, 0, 0) is UNKNOWN
    dedup.on_persisted("b", 0, Position(0, 0), 0)
    assert not dedup.is_fenced
    assert dedup.highest_sequenced_pushed == {"b": 0}
    assert dedup.check("b", 0, 0, 0) is DUP
    assert dedup.check("a", 0, 0, 0) is NOT_DUP


def test_dup_is_still_answered_while_fenced() -> None:
    dedup = enabled()
    dedup.check("p", 0, 0, 0)
    dedup.on_persisted("p", 0, Position(0, 0), 0)
    dedup.check("p", 1, 1, 0)
    dedup.check("p", 2, 2, 0)
    dedup.on_write_failed("p")
    assert dedup.check("p", 0, 0, 0) is DUP
    dedup.on_write_failed("p")
    assert not dedup.is_fenced
    assert dedup.check("p", 1, 1, 0) is NOT_DUP


# -- run-time switch and status --------------------------------------------------------


def test_status_names_are_pulsars() -> None:
    assert [s.value for s in DedupStatus] == [
        "Initialized",
        "Disabled",
        "Recovering",
        "Enabled",
        "Removing",
        "Failed",
    ]
    assert MessageDeduplication().stats().status == "Initialized"


def test_disabled_lets_everything_through_and_records_nothing() -> None:
    dedup = MessageDeduplication()
    assert dedup.set_enabled(False) is DedupAction.DELETE_CURSOR
    assert dedup.status is DedupStatus.DISABLED
    for _ in range(2):
        assert dedup.check("p", 0, 0, 0) is NOT_DUP
        dedup.on_persisted("p", 0, Position(0, 0), 0)
    assert dedup.last_sequence_id("p") == -1
    assert dedup.maybe_snapshot(10**9) is None


def test_disabling_drops_state_and_enabling_recovers() -> None:
    writer = Writer(enabled())
    dedup = writer.dedup
    writer.publish("p", 3)
    assert dedup.set_enabled(True) is DedupAction.NONE
    assert dedup.set_enabled(False) is DedupAction.DELETE_CURSOR
    assert dedup.stats().status == "Disabled"
    assert dedup.highest_sequenced_pushed == {}
    assert dedup.set_enabled(False) is DedupAction.NONE
    assert dedup.set_enabled(True) is DedupAction.RECOVER
    assert dedup.status is DedupStatus.RECOVERING
    assert dedup.check("p", 3, 3, 0) is UNKNOWN  # no producer may publish while recovering
    dedup.begin_recovery({"p": 3}, Position(0, 0))
    dedup.finish_recovery(0)
    assert dedup.status is DedupStatus.ENABLED
    assert dedup.check("p", 3, 3, 0) is DUP


def test_disabling_during_recovery_aborts_the_replay() -> None:
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 1}, Position(0, 0))
    assert dedup.set_enabled(False) is DedupAction.DELETE_CURSOR
    with pytest.raises(DedupStateError):
        dedup.replay_entry("p", 2, Position(0, 1))
    with pytest.raises(DedupStateError):
        dedup.replay_entries({"p": 2}, 1, Position(0, 1))
    with pytest.raises(DedupStateError):
        dedup.finish_recovery(0)


def test_reg_p3_second_replay_while_one_runs_is_refused() -> None:
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({}, Position(0, 0))
    with pytest.raises(DedupStateError, match="replay is running"):
        dedup.begin_recovery({}, Position(0, 0))
    assert dedup.set_enabled(True) is DedupAction.NONE  # still recovering, nothing new starts


def test_recovery_calls_out_of_turn_are_refused() -> None:
    dedup = MessageDeduplication()
    with pytest.raises(DedupStateError):
        dedup.begin_recovery({})
    with pytest.raises(DedupStateError):
        dedup.replay_entry("p", 0, Position(0, 0))
    with pytest.raises(DedupStateError):
        dedup.replay_entries({}, 0, Position(0, 0))
    with pytest.raises(DedupStateError):
        dedup.fail_recovery()


def test_failed_recovery_blocks_sends_until_retried_or_disabled() -> None:
    dedup = MessageDeduplication()
    dedup.set_enabled(True)
    dedup.begin_recovery({"p": 1})
    dedup.fail_recovery()
    assert dedup.stats().status == "Failed"
    assert dedup.check("p", 9, 9, 0) is UNKNOWN
    assert dedup.set_enabled(True) is DedupAction.RECOVER
    dedup.fail_recovery()
    assert dedup.set_enabled(False) is DedupAction.DELETE_CURSOR
    assert dedup.check("p", 9, 9, 0) is NOT_DUP


def test_transition_table_covers_every_status_the_class_enters() -> None:
    for status in (DedupStatus.INITIALIZED, DedupStatus.DISABLED, DedupStatus.FAILED):
        assert TRANSITIONS[(status, True)] == (DedupStatus.RECOVERING, DedupAction.RECOVER)
    for status in (DedupStatus.INITIALIZED, DedupStatus.RECOVERING, DedupStatus.ENABLED):
        assert TRANSITIONS[(status, False)][0] is DedupStatus.DISABLED
    assert (DedupStatus.ENABLED, True) not in TRANSITIONS


def test_callbacks_after_disable_are_ignored() -> None:
    dedup = enabled()
    dedup.check("p", 0, 0, 0)
    dedup.set_enabled(False)
    dedup.on_persisted("p", 0, Position(0, 0), 0)
    dedup.on_write_failed("p")
    assert dedup.highest_sequenced_persisted == {}
    assert not dedup.is_fenced


# -- configuration ---------------------------------------------------------------------


def test_config_defaults_are_pulsars() -> None:
    config = DeduplicationConfig()
    assert (
        config.entries_interval,
        config.snapshot_interval_s,
        config.snapshot_frequency_s,
        config.max_number_of_producers,
        config.producer_inactivity_timeout_minutes,
    ) == (1000, 120, 120, 10000, 360)


def test_config_reads_broker_conf_keys() -> None:
    config = DeduplicationConfig.from_properties(
        {
            "brokerDeduplicationEntriesInterval": " 50 ",
            "brokerDeduplicationMaxNumberOfProducers": "3",
            "unrelatedKey": "x",
        }
    )
    assert (config.entries_interval, config.max_number_of_producers) == (50, 3)
    assert set(CONFIG_KEYS) == {
        "brokerDeduplicationEntriesInterval",
        "brokerDeduplicationSnapshotIntervalSeconds",
        "brokerDeduplicationSnapshotFrequencyInSeconds",
        "brokerDeduplicationMaxNumberOfProducers",
        "brokerDeduplicationProducerInactivityTimeoutMinutes",
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("brokerDeduplicationEntriesInterval", "ten", "must be an integer"),
        ("brokerDeduplicationProducerInactivityTimeoutMinutes", "-1", "must be >= 0"),
    ],
)
def test_config_errors_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"{key} {message}"):
        DeduplicationConfig.from_properties({key: value})


def test_a_batch_with_a_new_tail_is_stored_when_the_shell_asks_to_judge_by_the_last_id() -> None:
    dedup = enabled()
    assert dedup.check("p", 0, 4, 0) is NOT_DUP
    dedup.on_persisted("p", 4, Position(1, 0), 0)
    assert dedup.check("p", 3, 7, 0, store_partial=True) is PARTIAL
    assert dedup.last_sequence_id("p") == 7
    dedup.on_persisted("p", 7, Position(1, 1), 0)
    assert dedup.check("p", 5, 7, 0) is DUP
