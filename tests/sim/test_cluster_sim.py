"""Several brokers over one metadata store and shared files: the checkers must pass on every
schedule and named scenario, each must fail when the rule it guards is planted broken, and a
seed must replay."""

from __future__ import annotations

import random

import pytest

from magnetar.core.cluster.managed_ledger_info import LedgerInfo, LedgerWriter, ManagedLedgerInfo
from magnetar.core.cluster.metadata_paths import managed_ledger_path
from magnetar.core.names import TopicName
from magnetar.testing.sim import __main__ as sim_main
from magnetar.testing.sim.cluster_checkers import ClusterChecker, ClusterViolation, Receipt
from magnetar.testing.sim.cluster_files import SimSharedFiles
from magnetar.testing.sim.cluster_schedules import SCENARIOS, run
from magnetar.testing.sim.cluster_store import SimMetadataStore

CHUNK = 200
#: schedules in the CI run: CHUNK each
CHUNKS = 6


@pytest.mark.parametrize("first", range(0, CHUNK * CHUNKS, CHUNK))
def test_cluster_schedules_keep_their_promises(first: int) -> None:
    failed = [(r.seed, r.phase, r.violation) for r in map(run, range(first, first + CHUNK)) if not r.ok]
    assert failed == []


def test_schedules_reach_what_they_are_meant_to_check() -> None:
    """Over a few seeds every fault happens, and brokers still writing a ledger get fenced."""
    totals: dict[str, int] = {}
    for seed in range(150):
        for key, value in run(seed).figures.items():
            totals[key] = totals.get(key, 0) + value
    for key in ("receipts", "pauses", "cuts", "kills", "store_restarts", "store_sessions_lost",
                "owner_nodes_dropped", "unloads", "ledger_ends_read", "fenced_live_writers", "send_errors"):
        assert totals.get(key, 0) > 0, (key, totals)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_named_scenarios_keep_the_promises(scenario: str) -> None:
    result = run(1, scenario=scenario)
    assert result.ok, result.violation
    assert result.figures["ledger_ends_read"] >= 1  # the successor fenced the owner's ledger


def test_pulsar_24478_a_store_restart_leaves_one_broker_serving_the_topic() -> None:
    result = run(1, scenario="pulsar-24478")
    assert result.ok and result.figures["scenario_taken_over"] == 1 and result.figures["store_restarts"] == 1
    # the old owner's append, fsynced while it was stopped, got an error, not a receipt
    assert result.figures["send_errors"] >= 1


@pytest.mark.parametrize(("scenario", "planted"), [
    ("pulsar-24478", "skip_session_check"),
    ("owner-node-dropped", "skip_takeover_wait"),
    ("store-restored-without-sessions", "skip_own_session_age"),
])
def test_each_rule_has_a_scenario_that_fails_without_it(scenario: str, planted: str) -> None:
    result = run(1, overrides={planted: "true"}, scenario=scenario)
    assert result.violation is not None and "acknowledged entry" in result.violation
    assert "after the ledger was closed" in result.violation


def test_random_schedules_catch_acknowledgements_without_the_session_check() -> None:
    failed = [r for r in (run(seed, overrides={"skip_session_check": "true"}) for seed in range(0, 60)) if not r.ok]
    assert failed and all("acknowledged" in (r.violation or "") for r in failed)


def test_a_seed_replays_the_same_run() -> None:
    a, b = run(777), run(777)
    assert a.ok and a.digest == b.digest and a.steps == b.steps and a.figures == b.figures
    assert run(778).digest != a.digest


def test_the_checker_sees_a_close_that_cuts_off_an_acknowledged_entry() -> None:
    store = SimMetadataStore(1000)
    files = SimSharedFiles(random.Random(0))
    checker = ClusterChecker(store, files)
    topic, writer = "persistent://public/default/t0", LedgerWriter("b0", 1)
    info = ManagedLedgerInfo((LedgerInfo(1, None, writer),))
    client = store.client("b0")
    client.connect()
    client.put(managed_ledger_path(TopicName.parse(topic)), info.to_json(), -1)
    files.create((topic, 1), str(writer))
    for message in ("m0", "m1"):
        files.append((topic, 1), message)
    files.fsync((topic, 1))
    checker.on_ack(Receipt(topic, 1, 0, "m0", str(writer), "b0"))
    checker.on_ack(Receipt(topic, 1, 1, "m1", str(writer), "b0"))
    with pytest.raises(ClusterViolation, match="two writers"):
        checker.on_ack(Receipt(topic, 1, 1, "m1", "b1#2", "b1"))
    with pytest.raises(ClusterViolation, match="lost: the ledger was closed at 1 entries"):
        checker.on_ledger_list(topic, info.with_open_closed_at(1))
    with pytest.raises(ClusterViolation, match="not durable"):
        files.append((topic, 1), "m2")
        checker.on_ack(Receipt(topic, 1, 2, "m2", str(writer), "b0"))


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main.main(["cluster", "--seed", "5", "--schedules", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 5") and '"schedules": 3, "violations": 0' in out
    assert sim_main.main(["cluster", "--seed", "1", "--scenario", "pulsar-24478",
                          "--set", "skip_session_check=true"]) == 1
    assert "VIOLATION" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--schedules", "0"], ["--set", "nonsense=1"], ["--set", "margin_ms=abc"], ["--set", "novalue"],
    ["--scenario", "unknown"], ["--seed", "x"],
])
def test_command_line_refuses_bad_input(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sim_main.main(["cluster", *argv])
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_a_hundred_thousand_cluster_schedules() -> None:
    assert sim_main.main(["cluster", "--seed", "1000000", "--schedules", "100000", "--jobs", "2"]) == 0
