"""Broker-wide schedules: several connections, topics and subscription types, simulated
storage with failures and crashes; the checkers must pass on every schedule, a seed must
replay, and a planted bug must be reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.dedup.message_deduplication import DedupOutcome, MessageDeduplication
from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.dispatchers.single_active_consumer import SingleActiveConsumerDispatcher
from magnetar.core.positions import BEFORE_START, Position
from magnetar.core.subscriptions.consumer import Consumer
from magnetar.core.subscriptions.cursor import Cursor
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import AppendFailed, LedgerConfig
from magnetar.testing.sim import __main__ as sim_main
from magnetar.testing.sim.broker_schedules import BrokerRunResult, main, run, shrink
from magnetar.testing.sim.broker_storage import SimLedger, SimStorage, SyncFailed
from magnetar.testing.sim.broker_world import parse_broker_schedule

CHUNK = 125
#: schedules in the CI run: CHUNK each
CHUNKS = 8
SHORT_STEPS = 40


def _failures(seeds: range, steps: int | None = None) -> Iterator[BrokerRunResult]:
    for seed in seeds:
        result = run(seed, steps)
        if not result.ok:
            yield result


@pytest.mark.parametrize("first", range(0, CHUNK * CHUNKS, CHUNK))
def test_broker_schedules_keep_their_promises(first: int) -> None:
    failed = [(r.seed, r.violation) for r in _failures(range(first, first + CHUNK), SHORT_STEPS)]
    assert failed == []


def test_full_length_schedules_keep_their_promises() -> None:
    failed = [(r.seed, r.violation) for r in _failures(range(50_000, 50_040))]
    assert failed == []


def test_schedules_reach_what_they_are_meant_to_check() -> None:
    """Over a few seeds every kind of fault and every check happens (else the checks prove little)."""
    totals: dict[str, int] = {}
    for seed in range(60):
        for key, value in run(seed, SHORT_STEPS).figures.items():
            totals[key] = totals.get(key, 0) + value
    for key in ("receipts", "deliveries", "acks", "delayed_delivered", "crashes", "unloads", "take_backs",
                "send_errors", "seeks", "key_order_checks", "subscription_order_checks",
                "restored_cursors_checked"):
        assert totals[key] > 0, (key, totals)


def test_a_seed_replays_the_same_run() -> None:
    a, b = run(777), run(777)
    assert a.ok and a.digest == b.digest and a.figures == b.figures and a.steps == b.steps
    replayed = run(777, schedule=parse_broker_schedule(a.schedule_text()))
    assert replayed.ok and replayed.steps[:len(a.steps)] == a.steps
    assert replayed.figures["deliveries"] == a.figures["deliveries"]
    assert run(778).digest != a.digest


@pytest.mark.parametrize("keep_written", [False, True])
def test_the_simulated_ledger_takes_back_failed_writes_and_keeps_only_what_a_crash_allows(
        keep_written: bool) -> None:
    storage = SimStorage(LedgerConfig(max_entries_per_ledger=1000), [0])
    ledger = storage.open("t")
    ledger.append(b"a")
    b = ledger.append(b"b")
    assert storage.sync(ledger) is None  # appended, not written: nothing to make durable
    ledger.flush()
    c = ledger.append(b"c")
    assert storage.sync(ledger) == b and storage.take_completion("t") == (ledger, b)
    ledger.fail_next_flush = True
    with pytest.raises(AppendFailed) as failed:
        ledger.flush()
    assert failed.value.position == c and ledger.last_position() == b
    assert ledger.append(b"d") == c  # the next append lands where the taken-back one stood
    ledger.flush()
    ledger.fail_next_sync = True
    with pytest.raises(SyncFailed):
        storage.sync(ledger)
    assert storage.take_completion("t") is None
    ledger.lose_power(keep_written)
    reopened = storage.open("t")
    stored = [entry for _, entry in reopened.iter_entries(BEFORE_START)]
    assert stored == ([b"a", b"b", b"d"] if keep_written else [b"a", b"b"])


REGRESSIONS = Path(__file__).parent / "regressions"


@pytest.mark.parametrize("name", ["broker_send_after_failed_write", "broker_producer_added_while_fenced"])
def test_regression_schedules_keep_their_promises(name: str) -> None:
    """Schedules that found bugs (each file says which), replayed under their seed's options."""
    text = (REGRESSIONS / f"{name}.txt").read_text()
    seed = int(text.split()[2].rstrip(":"))  # "# seed N: ..."
    result = run(seed, schedule=parse_broker_schedule(text))
    assert result.ok, result.violation
    assert result.figures["take_backs"] == 1 and result.figures["send_errors"] > 0


# -- planted bugs: the checkers must catch them ---------------------------------------------
def _first_failure(seeds: range, steps: int | None = SHORT_STEPS) -> BrokerRunResult:
    for result in _failures(seeds, steps):
        return result
    raise AssertionError(f"no schedule of seeds {seeds} found the planted bug")


class _Lost:
    """A connection that drops what is written to it."""

    def send_message(self, *args: object) -> None:
        pass


def test_a_dispatcher_that_skips_a_message_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Consumer.deliver

    def deliver(self: Consumer, pos: Position, *args: Any) -> None:
        if pos.entry_id == 1 and self.msg_out.total_msgs == 0:
            sink, self.sink = self.sink, _Lost()  # type: ignore[assignment]
            try:
                real(self, pos, *args)
            finally:
                self.sink = sink
            return
        real(self, pos, *args)

    monkeypatch.setattr(Consumer, "deliver", deliver)
    failed = _first_failure(range(0, 100))
    assert any(text in (failed.violation or "") for text in ("never delivered", "backlog", "before earlier")), \
        failed.violation


def test_a_delayed_message_sent_early_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Topic, "delayed_holds", lambda *args, **kwargs: False)
    failed = _first_failure(range(0, 200))
    assert "before its delivery time" in (failed.violation or ""), failed.violation


def test_deduplication_that_lets_a_resend_through_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = MessageDeduplication.check

    def check(self: MessageDeduplication, *args: object, **kwargs: object) -> DedupOutcome:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        return DedupOutcome.NOT_DUP

    monkeypatch.setattr(MessageDeduplication, "check", check)
    failed = _first_failure(range(0, 200))
    assert "again at" in (failed.violation or "") or "stored at" in (failed.violation or ""), failed.violation


def test_storage_that_loses_synced_entries_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = SimLedger.lose_power

    def lose_power(self: SimLedger, keep_written: bool) -> None:
        with self._lock:
            self._synced = None
        real(self, False)

    monkeypatch.setattr(SimLedger, "lose_power", lose_power)
    failed = _first_failure(range(0, 200), None)
    assert "lost" in (failed.violation or "") or "never delivered" in (failed.violation or ""), failed.violation


def test_a_restored_cursor_ahead_of_the_acks_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def restore_ranges(self: Cursor, ranges: object) -> None:
        self.ack_cumulative(self.next_position(self.next_position(self.mark_delete)))

    monkeypatch.setattr(Cursor, "restore_ranges", restore_ranges)
    failed = _first_failure(range(0, 200), None)
    # caught at the restart, or (when the cursor skipped what was not stored yet) when the
    # consumer is sent what follows the swallowed entry
    assert any(text in (failed.violation or "") for text in ("no application acknowledged", "before earlier")), \
        failed.violation


def test_a_second_active_consumer_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def choose(self: SingleActiveConsumerDispatcher) -> Consumer | None:
        return self.consumers[-1] if self.consumers else None

    monkeypatch.setattr(SingleActiveConsumerDispatcher, "_choose", choose)
    failed = _first_failure(range(0, 200))
    assert "the active consumer is" in (failed.violation or ""), failed.violation


def test_key_shared_sending_to_a_new_owner_while_the_old_one_holds_the_key_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KeySharedDispatcher, "_may_send", lambda *args: True)
    failed = _first_failure(range(0, 300))
    assert any(text in (failed.violation or "") for text in ("same key", "before earlier")), failed.violation


# -- the command line -------------------------------------------------------------------
def test_the_command_line_runs_schedules_and_sums_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main.main(["broker", "--seed", "5", "--schedules", "3", "--steps", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "seed 5"
    summary = json.loads(out[-1])
    assert summary["schedules"] == 3 and summary["violations"] == 0 and summary["deliveries"] > 0


def test_a_time_budget_stops_the_run_early(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "9", "--schedules", "1000000", "--steps", "20", "--minutes", "0.01"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert 0 < summary["schedules"] < 1_000_000 and summary["violations"] == 0


def test_several_jobs_give_the_results_of_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3", "--schedules", "6", "--steps", "20", "--jobs", "2"]) == 0
    two = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert main(["--seed", "3", "--schedules", "6", "--steps", "20"]) == 0
    one = json.loads(capsys.readouterr().out.splitlines()[-1])
    timings = ("seconds", "cpu_seconds")
    assert {k: v for k, v in two.items() if k not in timings} == {k: v for k, v in one.items() if k not in timings}


def test_a_failing_schedule_is_printed_shrunk_and_replays(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(Topic, "delayed_holds", lambda *args, **kwargs: False)
    failed = _first_failure(range(0, 200))
    shrunk = shrink(failed, budget=60)
    assert not shrunk.ok and len(shrunk.steps) <= len(failed.steps)
    assert main(["--seed", str(failed.seed), "--steps", str(SHORT_STEPS)]) == 1
    out = capsys.readouterr().out
    assert f"seed {failed.seed}: VIOLATION" in out and "# replay:" in out
    schedule = tmp_path / "failing.txt"
    schedule.write_text(shrunk.schedule_text())
    assert main(["--seed", str(failed.seed), "--schedule", str(schedule)]) == 1
    assert "before its delivery time" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--schedules", "0"], ["--jobs", "0"], ["--steps", "-1"], ["--seed", "x"],
                                  ["--minutes", "0"], ["--minutes", "soon"]])
def test_bad_arguments_are_refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_a_bad_schedule_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("send p0 a\nfly away\n")
    with pytest.raises(SystemExit) as exc:
        main(["--seed", "1", "--schedule", str(bad)])
    assert exc.value.code == 2
    assert "not a schedule step" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--seed", "1", "--schedule", str(tmp_path / "missing.txt")])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_broker_campaign() -> None:
    failed = [(r.seed, r.violation) for r in _failures(range(1_000_000, 1_010_000))]
    assert failed == []
