"""``magnetar standalone`` configuration: Pulsar-style files, unknown keys, bad values, bad arguments.

Runs that must fail are started all at once (each is a Python start-up) and their
outcomes shared by the tests that look at them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_helpers import round_trip

from magnetar.testing.broker_process import BrokerProcess

CLI = [sys.executable, "-m", "magnetar.cli"]

BAD_VALUES = {
    "maxMessageSize=abc": "maxMessageSize",
    "allowAutoTopicCreation=maybe": "allowAutoTopicCreation",
    "allowAutoTopicCreationType=sometimes": "allowAutoTopicCreationType",
    "brokerServicePort=70000": "brokerServicePort",
    "defaultNumPartitions=0": "defaultNumPartitions",
    "maxUnackedMessagesPerConsumer=-1": "maxUnackedMessagesPerConsumer",
    "keepAliveIntervalSeconds=0": "keepAliveIntervalSeconds",
    "pulsarChannelWriteBufferLowWaterMark=1000000": "pulsarChannelWriteBufferHighWaterMark",
    "maxProducersPerTopic=-2": "maxProducersPerTopic",
    "this line has no equals sign": "expected key=value",
}
BAD_ARGUMENTS = {
    "unknown option": ["standalone", "--no-such-option"],
    "unknown command": ["no-such-command"],
    "--set without =": ["standalone", "--set", "missingEquals"],
    "--set with a bad value": ["standalone", "--set", "maxMessageSize=lots"],
    "missing config file": ["standalone", "--config", "nope.conf"],
}


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def failed_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every run that must be refused, started together; keyed by BAD_VALUES / BAD_ARGUMENTS key."""
    workdir = tmp_path_factory.mktemp("cli")
    runs: dict[str, list[str]] = dict(BAD_ARGUMENTS)
    for number, line in enumerate(BAD_VALUES):
        conf = workdir / f"broker-{number}.conf"
        conf.write_text(f"clusterName=standalone\n{line}\n")
        runs[line] = ["standalone", "--config", str(conf), "--data-dir", str(workdir / f"data-{number}")]
    procs = {key: subprocess.Popen([*CLI, *args], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for key, args in runs.items()}
    outcomes = {}
    for key, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        outcomes[key] = Outcome(proc.returncode, stdout, stderr)
    return outcomes


@pytest.fixture(scope="module")
def configured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker started from a Pulsar standalone.conf-style file with keys Magnetar does not use."""
    workdir = tmp_path_factory.mktemp("configured")
    conf = workdir / "standalone.conf"
    conf.write_text(
        "# a Pulsar standalone.conf, as Pulsar ships it, keeps working\n"
        "clusterName=standalone\n"
        "allowAutoTopicCreation=true\n"
        "managedLedgerMaxEntriesPerLedger=100\n"
        "zookeeperServers=localhost:2181\n"
        "bookkeeperNumberOfChannelsPerBookie=16\n"
        "! another comment style\n"
        "maxUnackedMessagesPerConsumer = 500\n"
    )
    proc = BrokerProcess(workdir / "data", config_file=conf).start()
    yield proc
    proc.kill()


def test_pulsar_style_config_file_with_unknown_keys(configured_broker: BrokerProcess) -> None:
    round_trip(configured_broker.service_url)
    log = configured_broker.log_tail(200)
    ignored = [line for line in log.splitlines() if "ignoring config keys" in line]
    assert len(ignored) == 1, log
    assert "zookeeperServers" in ignored[0] and "bookkeeperNumberOfChannelsPerBookie" in ignored[0]
    assert "maxUnackedMessagesPerConsumer" not in ignored[0]


def test_port_in_use_is_a_clear_error(configured_broker: BrokerProcess, tmp_path: Path) -> None:
    result = subprocess.run(
        [*CLI, "standalone", "--data-dir", str(tmp_path / "second"), "--set", "bindAddress=127.0.0.1",
         "--set", f"brokerServicePort={configured_broker.port}",
         "--set", f"webServicePort={configured_broker.web_port + 1}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cannot start" in result.stderr and "Traceback" not in result.stderr
    round_trip(configured_broker.service_url)


@pytest.mark.parametrize("line", list(BAD_VALUES))
def test_bad_config_value_is_a_clear_error(failed_runs: dict[str, Outcome], line: str) -> None:
    outcome = failed_runs[line]
    assert outcome.returncode == 2
    assert BAD_VALUES[line] in outcome.stderr
    assert "Traceback" not in outcome.stderr


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_command_line_is_a_clear_error(failed_runs: dict[str, Outcome], case: str) -> None:
    outcome = failed_runs[case]
    assert outcome.returncode == 2
    assert outcome.stderr.strip()
    assert "Traceback" not in outcome.stderr


def test_bad_log_level_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run([*CLI, "standalone", "--log-level", "loud"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--log-level" in result.stderr


def test_help_lists_the_standalone_command(tmp_path: Path) -> None:
    result = subprocess.run([*CLI, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "standalone" in result.stdout
