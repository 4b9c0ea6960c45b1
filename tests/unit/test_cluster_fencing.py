"""The fencing rule in core: the session lease that gates acknowledgements, the takeover
steps that close a previous writer's ledger, and the ledger list they write."""

from __future__ import annotations

import pytest

from magnetar.core.cluster.managed_ledger_info import (
    InvalidLedgerList,
    LedgerInfo,
    LedgerWriter,
    ManagedLedgerInfo,
)
from magnetar.core.cluster.metadata_store import SessionEvent
from magnetar.core.cluster.session_lease import SessionLease
from magnetar.core.cluster.topic_takeover import (
    TRANSITIONS,
    CheckPreviousSession,
    ReadLedgerEnd,
    ReadLedgerList,
    StartServing,
    TakeoverError,
    TakeoverStep,
    TopicTakeover,
    WriteLedgerList,
)

ME = LedgerWriter("b1", 20)
OLD = LedgerWriter("b0", 10)


def lease(session_id: int = 20) -> SessionLease:
    result = SessionLease(session_timeout_ms=5000, margin_ms=500)
    result.on_session_event(SessionEvent.SESSION_REESTABLISHED, session_id)
    return result


def test_the_lease_runs_from_when_the_heartbeat_was_sent() -> None:
    lease_ = lease()
    assert not lease_.may_acknowledge(0)  # no heartbeat answered yet in this session
    lease_.on_heartbeat_answered(20, sent_ms=1000)
    assert lease_.valid_until_ms() == 1000 + 5000 - 500
    assert lease_.may_acknowledge(5499) and not lease_.may_acknowledge(5500)
    lease_.on_heartbeat_answered(20, sent_ms=900)  # an older heartbeat answered late extends nothing
    assert lease_.valid_until_ms() == 5500


def test_the_lease_ends_with_its_session_and_a_new_session_starts_without_one() -> None:
    lease_ = lease()
    lease_.on_heartbeat_answered(20, 1000)
    lease_.on_session_event(SessionEvent.CONNECTION_LOST, 20)
    assert lease_.may_acknowledge(2000)  # a connection loss leaves the session to run out
    lease_.on_session_event(SessionEvent.SESSION_LOST, 20)
    assert not lease_.may_acknowledge(2000)
    lease_.on_session_event(SessionEvent.SESSION_REESTABLISHED, 21)
    lease_.on_heartbeat_answered(20, 3000)  # a late answer of the lost session
    assert not lease_.may_acknowledge(3001)
    lease_.on_heartbeat_answered(21, 3000)
    assert lease_.may_acknowledge(3001, session_id=21)
    assert not lease_.may_acknowledge(3001, session_id=20)  # a ledger opened in the lost session


def test_lease_settings_are_checked() -> None:
    assert SessionLease(3000).margin_ms == 300 and SessionLease(3000).heartbeat_interval_ms() == 1000
    assert SessionLease(3000).takeover_wait_ms() == 3300
    for timeout, margin in ((0, None), (1000, 1000), (1000, -1)):
        with pytest.raises(ValueError):
            SessionLease(timeout, margin)


def test_takeover_of_an_open_ledger_waits_reads_its_end_then_fences_it() -> None:
    takeover = TopicTakeover(ME, owned_since_ms=1000, wait_ms=5500)
    assert takeover.start() == [ReadLedgerList()]
    listed = ManagedLedgerInfo((LedgerInfo(1, 7, OLD), LedgerInfo(2, None, OLD)))
    assert takeover.on_ledger_list(listed, version=4, now_ms=1001) == [CheckPreviousSession(OLD)]
    assert takeover.step is TakeoverStep.WAIT_PREVIOUS_SESSION and takeover.next_deadline_ms() == 6500
    assert takeover.on_previous_session(False, 1002) == []  # own session age unknown: the wait goes on
    assert takeover.on_timer(6499) == []
    assert takeover.on_timer(6500) == [ReadLedgerEnd(2)]
    [write] = takeover.on_ledger_end(3)
    assert write == WriteLedgerList(
        ManagedLedgerInfo((LedgerInfo(1, 7, OLD), LedgerInfo(2, 3, OLD), LedgerInfo(3, None, ME))), 4)
    assert takeover.on_written(write.info, 5) == [StartServing(3)]
    assert takeover.step is TakeoverStep.SERVING and takeover.version == 5


def test_an_ended_previous_session_is_not_waited_out_when_ours_is_older_than_the_wait() -> None:
    listed = ManagedLedgerInfo((LedgerInfo(1, None, OLD),))
    # our session since 0: by 6000 it is older than the 5500 ms wait
    takeover = TopicTakeover(ME, owned_since_ms=5000, wait_ms=5500, session_since_ms=0)
    assert takeover.on_ledger_list(listed, 1, 6000) == [CheckPreviousSession(OLD)]
    assert takeover.on_previous_session(False, 6000) == [ReadLedgerEnd(1)]
    assert takeover.step is TakeoverStep.READ_LEDGER_END
    # a live previous session: waited out in full
    takeover = TopicTakeover(ME, owned_since_ms=5000, wait_ms=5500, session_since_ms=0)
    takeover.on_ledger_list(listed, 1, 6000)
    assert takeover.on_previous_session(True, 6000) == [] and takeover.next_deadline_ms() == 10500
    # our own session younger than the wait (every session may have been dropped at once)
    takeover = TopicTakeover(ME, owned_since_ms=5000, wait_ms=5500, session_since_ms=4000)
    takeover.on_ledger_list(listed, 1, 6000)
    assert takeover.on_previous_session(False, 6000) == []
    assert takeover.on_timer(10500) == [ReadLedgerEnd(1)]
    assert takeover.on_previous_session(False, 10600) == []  # a late answer changes nothing


def test_a_ledger_of_our_own_earlier_session_is_fenced_like_anyones() -> None:
    takeover = TopicTakeover(ME, 0, 100)
    takeover.on_ledger_list(ManagedLedgerInfo((LedgerInfo(1, None, LedgerWriter("b1", 19)),)), 0, 0)
    assert takeover.step is TakeoverStep.WAIT_PREVIOUS_SESSION


def test_no_open_ledger_means_no_wait_and_a_lost_race_reads_again() -> None:
    takeover = TopicTakeover(ME, 0, 5500)
    [write] = takeover.on_ledger_list(None, -1, 0)
    assert write == WriteLedgerList(ManagedLedgerInfo((LedgerInfo(1, None, ME),)), -1)
    assert takeover.on_write_failed() == [ReadLedgerList()]
    # our write had landed after all: our own open ledger is closed and replaced, no wait
    assert takeover.on_ledger_list(write.info, 0, 1) == [ReadLedgerEnd(1)]
    [again] = takeover.on_ledger_end(0)
    assert again == WriteLedgerList(ManagedLedgerInfo((LedgerInfo(1, 0, ME), LedgerInfo(2, None, ME))), 0)
    assert takeover.on_written(again.info, 1) == [StartServing(2)]


def test_answers_out_of_step_are_refused_and_abandon_is_final() -> None:
    takeover = TopicTakeover(ME, 0, 10)
    with pytest.raises(TakeoverError):
        takeover.on_ledger_end(3)
    takeover.abandon()
    takeover.abandon()
    assert takeover.step is TakeoverStep.ABANDONED and takeover.on_timer(100) == []
    with pytest.raises(TakeoverError):
        takeover.on_ledger_list(None, -1, 0)
    assert {step for step, _ in TRANSITIONS} == set(TakeoverStep) - {TakeoverStep.ABANDONED}


def test_ledger_lists_keep_their_rules_and_round_trip() -> None:
    info = ManagedLedgerInfo((LedgerInfo(1, 7, OLD), LedgerInfo(2, None, OLD)))
    assert ManagedLedgerInfo.from_json(info.to_json()) == info
    assert info.open_ledger == LedgerInfo(2, None, OLD) and info.next_ledger_id() == 3
    with pytest.raises(InvalidLedgerList, match="close the open ledger"):
        info.with_new_ledger(ME)
    with pytest.raises(InvalidLedgerList, match="no open ledger"):
        info.with_open_closed_at(3).with_open_closed_at(3)
    with pytest.raises(InvalidLedgerList, match="only the last"):
        ManagedLedgerInfo((LedgerInfo(1, None), LedgerInfo(2, None)))
    with pytest.raises(InvalidLedgerList, match="increase"):
        ManagedLedgerInfo((LedgerInfo(2, 1), LedgerInfo(1, None)))
    for bad in (b"", b"{}", b'{"ledgerInfo": [{"entries": 1}]}', b'{"ledgerInfo": [{"ledgerId": "x"}]}'):
        with pytest.raises(InvalidLedgerList):
            ManagedLedgerInfo.from_json(bad)
