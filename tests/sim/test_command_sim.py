"""The command-level simulation: core's command handlers over the simulated broker shell,
several connections, storage completions in any allowed order, write and sync failures,
crash-restart; Pulsar's invariants on every schedule, and bugs planted to show the
checkers catch them."""

from __future__ import annotations

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.message_deduplication import DedupOutcome, MessageDeduplication
from magnetar.core.delayed import tracker as delayed_tracker
from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.positions import Position
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.core.topics import handover
from magnetar.storage.interfaces import AppendFailed, LedgerConfig
from magnetar.testing.sim import command_world
from magnetar.testing.sim.command_shell_twin import SimBroker, SimStorage
from magnetar.testing.sim.command_world import CommandOptions, run
from magnetar.testing.sim.sim_storage import SimLedgers

CHUNK = 125


@pytest.mark.parametrize("first", range(0, 1000, CHUNK))
def test_command_schedules_keep_pulsars_promises(first: int) -> None:
    failures = [f"seed {r.seed}: {r.violation}" for r in map(run, range(first, first + CHUNK)) if not r.ok]
    assert failures == []


def test_a_seed_replays_the_same_run() -> None:
    a, b = run(4242), run(4242)
    assert a == b
    assert a.deliveries > 0 and a.receipted > 0


def test_schedules_reach_every_feature() -> None:
    """Over a hundred and fifty seeds, every fault and every subscription type is exercised."""
    results = [run(seed) for seed in range(150)]
    assert sum(r.crashes for r in results) > 5
    assert sum(r.write_failures for r in results) > 5
    assert sum(r.sync_failures for r in results) > 1
    assert sum(r.handovers for r in results) > 50
    options = [CommandOptions.from_seed(seed) for seed in range(300)]
    assert {sub_type for o in options for _, _, sub_type in o.subscriptions} == \
        {"Exclusive", "Shared", "Failover", "Key_Shared"}
    assert any(o.dedup_topics for o in options) and any(o.delayed_fraction for o in options)


def test_the_ledger_twin_writes_syncs_and_fails_as_the_segment_ledger_does() -> None:
    taken_back: list[Position] = []
    ledgers = SimLedgers(LedgerConfig(max_entries_per_ledger=100), lambda: 0)
    ledgers.on_take_back = lambda name, first: taken_back.append(first)
    ledger = ledgers.open_ledger("t")
    first, second = ledger.append_many([b"a", b"b"])
    assert ledger.sync() is None  # nothing written yet: nothing to make durable
    ledger.flush()
    assert ledger.sync() == second
    third = ledger.append(b"c")
    ledger.fail_next_flush = True
    with pytest.raises(AppendFailed) as failed:
        ledger.flush()
    assert failed.value.position == third and taken_back == [third]
    assert ledger.last_position() == second and ledger.append(b"d") == third  # the next append lands there
    assert ledgers.crash() == {"t": second}  # unwritten "d" is lost with the crash
    reopened = ledgers.open_ledger("t")
    assert [entry for _, entry in reopened.iter_entries(Position(-1, -1))] == [b"a", b"b"]
    assert first.entry_id == 0


def test_durability_handles_complete_in_submission_order() -> None:
    storage = SimStorage(BrokerConfig(), lambda: 1_000, LedgerConfig())
    broker = SimBroker(storage)
    done: list[int] = []
    for i in range(3):
        broker.metadata_durable().add_done_callback(lambda _, i=i: done.append(i))
    assert broker.complete_metadata(2) == 2 and done == [0, 1]
    assert broker.complete_metadata(5) == 1 and done == [0, 1, 2]


def _first_violation(seeds: range) -> str:
    for seed in seeds:
        result = run(seed)
        if not result.ok:
            assert result.violation is not None
            return result.violation
    return ""


def test_a_lost_message_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: an individual ack also acknowledges the entry after it."""
    acknowledge = Subscription.acknowledge

    def greedy(self: Subscription, consumer: object, cumulative: bool, acks: list, now_ms: int) -> None:  # type: ignore[type-arg]
        acknowledge(self, consumer, cumulative, acks, now_ms)  # type: ignore[arg-type]
        if not cumulative and acks:
            pos = acks[-1][0]
            acknowledge(self, consumer, False, [(self.topic.next_position(pos), None)], now_ms)  # type: ignore[arg-type]
    monkeypatch.setattr(Subscription, "acknowledge", greedy)
    violation = _first_violation(range(200))
    # the skipped entry is missed at the end, or first by Key_Shared's order (an earlier entry never came)
    assert "never consumed" in violation or "neither acknowledged nor outstanding" in violation


def test_key_shared_disorder_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: Key_Shared sends a key to its new owner while the old one still holds it."""
    monkeypatch.setattr(KeySharedDispatcher, "_may_send", lambda *args: True)
    violation = _first_violation(range(400))
    assert "Key_Shared" in violation and ("outstanding" in violation or "out of order" in violation)


def test_a_duplicate_stored_by_deduplication_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: deduplication never judges a send a duplicate."""
    check = MessageDeduplication.check

    def blind(self: MessageDeduplication, *args: object, **kwargs: object) -> DedupOutcome:
        outcome = check(self, *args, **kwargs)  # type: ignore[arg-type]
        return DedupOutcome.NOT_DUP if outcome is DedupOutcome.DUP else outcome
    monkeypatch.setattr(MessageDeduplication, "check", blind)
    assert "stored twice" in _first_violation(range(400))


def test_a_handover_that_closes_consumers_before_their_acks_arrive_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a hand-over's drain says the consumers acknowledged everything at once,
    so acknowledgements still on their way are lost with the move."""
    monkeypatch.setattr(handover, "held_messages", lambda topic: 0)
    assert "delivered again after it" in _first_violation(range(400))


def test_an_early_delayed_message_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the delayed tracker counts everything within ten seconds as due."""
    monkeypatch.setattr(delayed_tracker, "cutoff_time_ms", lambda now_ms, tick_ms, strict: now_ms + 10_000)
    assert "before its deliver_at_time" in _first_violation(range(400))


def test_the_command_line_runs_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    assert command_world.main(["--seed", "3", "--schedules", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 3\n") and '"schedules": 5' in out and '"violations": 0' in out
    assert command_world.main(["--seed", "3", "--trace"]) == 0
    traced = capsys.readouterr().out
    assert "-> SUBSCRIBE" in traced and "<- SUCCESS" in traced and traced.endswith("ok\n")


@pytest.mark.parametrize("argv", [["--schedules", "0"], ["--jobs", "0"], ["--steps", "-1"], ["--seed", "x"]])
def test_the_command_line_refuses_bad_arguments(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        command_world.main(argv)
    assert exited.value.code == 2


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_command_campaign() -> None:
    failures = [f"seed {r.seed}: {r.violation}" for r in map(run, range(100_000, 120_000)) if not r.ok]
    assert failures == []
