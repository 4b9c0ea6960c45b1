"""The ``magnetar admin|client|perf`` commands, run as a user runs them: subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from magnetar.testing.broker_process import BrokerProcess


def magnetar(broker: BrokerProcess, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MAGNETAR_ADMIN_URL": broker.web_url, "MAGNETAR_SERVICE_URL": broker.service_url,
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "magnetar.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout_s)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture
def tenant() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_admin_resources(broker: BrokerProcess, tenant: str) -> None:
    assert ok(magnetar(broker, "admin", "tenants", "create", tenant)) == f"Created tenant {tenant}\n"
    ok(magnetar(broker, "admin", "namespaces", "create", f"{tenant}/ns"))
    ok(magnetar(broker, "admin", "namespaces", "set-message-ttl", f"{tenant}/ns", "-ttl", "2m"))
    assert ok(magnetar(broker, "admin", "--json", "namespaces", "get-message-ttl", f"{tenant}/ns")).strip() == "120"
    topic = f"persistent://{tenant}/ns/orders"
    out = ok(magnetar(broker, "admin", "topics", "create-partitioned-topic", "-p", "3", topic))
    assert "3 partitions" in out
    table = ok(magnetar(broker, "admin", "topics", "list", f"{tenant}/ns"))
    assert all(f"{topic}-partition-{i}" in table for i in range(3))
    stats = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "partitioned-stats", topic)))
    assert stats["metadata"] == {"partitions": 3} and stats["msgInCounter"] == 0
    ok(magnetar(broker, "admin", "topics", "delete-partitioned-topic", topic))


def test_client_and_subscription_verbs(broker: BrokerProcess, tenant: str) -> None:
    topic = f"persistent://public/default/{tenant}"
    out = ok(magnetar(broker, "client", "produce", topic, "-m", "alpha", "-m", "beta", "-n", "2", "--key", "k",
                      "-p", "source=cli"))
    assert out == "4 messages successfully produced\n"
    ok(magnetar(broker, "admin", "topics", "create-subscription", topic, "-s", "peek", "-m", "earliest"))
    lines = ok(magnetar(broker, "client", "consume", topic, "-s", "reader", "-p", "Earliest", "-n", "4",
                        "-t", "Shared", "--json")).splitlines()
    received = [json.loads(line) for line in lines]
    assert [m["payload"] for m in received] == ["alpha", "beta", "alpha", "beta"]
    assert received[0]["key"] == "k" and received[0]["properties"] == {"source": "cli"}

    peeked = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "peek-messages", topic, "-s", "peek",
                                    "-n", "2")))
    assert [m["payload"] for m in peeked] == ["alpha", "beta"] and peeked[0]["properties"] == {"source": "cli"}
    ok(magnetar(broker, "admin", "topics", "skip", topic, "-s", "peek", "-n", "3"))
    stats = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "stats", topic)))
    assert stats["subscriptions"]["peek"]["msgBacklog"] == 1 and stats["msgInCounter"] == 4
    assert stats["subscriptions"]["reader"]["msgBacklog"] == 0
    assert "Cleared the backlog" in ok(magnetar(broker, "admin", "topics", "skip-all", topic, "-s", "peek"))
    ok(magnetar(broker, "admin", "topics", "reset-cursor", topic, "-s", "peek", "-t", "1h"))
    internal = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "internal-stats", topic)))
    assert internal["numberOfEntries"] == 4 and internal["cursors"]["peek"]["markDeletePosition"].endswith(":-1")


def test_errors_exit_non_zero_with_one_line(broker: BrokerProcess) -> None:
    calls = [("admin", "topics", "stats", "persistent://no-such-tenant/ns/t"),
             ("admin", "--admin-url", "http://127.0.0.1:9", "tenants", "list"),
             ("admin", "topics", "create", "bogus://x/y/z"),
             ("client", "consume", "t", "-s", "s", "-t", "Sometimes")]
    with ThreadPoolExecutor(len(calls)) as pool:
        missing, unreachable, invalid, usage = pool.map(lambda args: magnetar(broker, *args), calls)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == "error: Tenant does not exist (HTTP 404)\n"
    assert unreachable.returncode == 1 and len(unreachable.stderr.splitlines()) == 1
    assert unreachable.stderr.startswith("error: cannot reach the admin API at http://127.0.0.1:9")
    assert invalid.returncode == 1 and "domain must be persistent or non-persistent" in invalid.stderr
    assert usage.returncode == 2 and "Sometimes" in usage.stderr


def test_perf_produce_and_consume(broker: BrokerProcess, tenant: str) -> None:
    topic = f"persistent://public/default/perf-{tenant}"
    env = {**os.environ, "MAGNETAR_SERVICE_URL": broker.service_url}
    consumer = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli", "perf", "consume", topic, "-s", "perf", "-m", "300", "--time", "30s",
         "-p", "Earliest", "--stats-interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    produced = magnetar(broker, "perf", "produce", topic, "-r", "500", "-m", "300", "-s", "64", "-k", "5",
                        "--stats-interval", "0.2", "--json")
    summary = json.loads(ok(produced))
    assert summary["mode"] == "produce" and summary["messages"] == 300 and summary["failures"] == 0
    assert summary["bytes"] == 300 * 64 and summary["latencyMs"]["p99"] >= summary["latencyMs"]["p50"] > 0
    assert "Throughput produced:" in produced.stderr and "msg/s" in produced.stderr
    out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err
    assert "Aggregated throughput stats --- 300 messages" in out and "Aggregated latency stats" in out


def test_permission_limit_and_rate_verbs(broker: BrokerProcess, tenant: str) -> None:
    ok(magnetar(broker, "admin", "tenants", "create", tenant))
    namespace = f"{tenant}/ns"
    ok(magnetar(broker, "admin", "namespaces", "create", namespace))
    ok(magnetar(broker, "admin", "namespaces", "grant-permission", namespace, "--role", "app",
                "--actions", "produce,consume"))
    granted = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "permissions", namespace)))
    assert sorted(granted["app"]) == ["consume", "produce"]
    topic = f"persistent://{namespace}/t"
    ok(magnetar(broker, "admin", "topics", "create", topic))
    ok(magnetar(broker, "admin", "topics", "grant-permission", topic, "--role", "reader", "--actions", "consume"))
    on_topic = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "permissions", topic)))
    assert on_topic["reader"] == ["consume"] and "app" in on_topic
    ok(magnetar(broker, "admin", "topics", "revoke-permission", topic, "--role", "reader"))
    ok(magnetar(broker, "admin", "namespaces", "revoke-permission", namespace, "--role", "app"))
    assert json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "permissions", namespace))) == {}
    ok(magnetar(broker, "admin", "namespaces", "set-max-topics-per-namespace", namespace, "-t", "5"))
    shown = ok(magnetar(broker, "admin", "--json", "namespaces", "get-max-topics-per-namespace", namespace))
    assert shown.strip() == "5"
    ok(magnetar(broker, "admin", "namespaces", "set-publish-rate", namespace, "-m", "100"))
    rate = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "policies", namespace)))
    assert rate["publishMaxMessageRate"]["standalone"]["publishThrottlingRateInMsg"] == 100
    bad = magnetar(broker, "admin", "namespaces", "grant-permission", namespace, "--role", "x", "--actions", "fly")
    assert bad.returncode != 0 and bad.stderr.strip()


def test_lifecycle_verbs(broker: BrokerProcess, tenant: str) -> None:
    ok(magnetar(broker, "admin", "tenants", "create", tenant))
    namespace = f"{tenant}/ns"
    ok(magnetar(broker, "admin", "namespaces", "create", namespace))
    ok(magnetar(broker, "admin", "namespaces", "set-inactive-topic-policies", namespace,
                "-m", "delete_when_subscriptions_caught_up", "-t", "10m", "-d"))
    shown = json.loads(ok(magnetar(broker, "admin", "--json", "namespaces", "get-inactive-topic-policies",
                                   namespace)))
    assert shown == {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                     "maxInactiveDurationSeconds": 600, "deleteWhileInactive": False}
    ok(magnetar(broker, "admin", "namespaces", "set-subscription-expiration-time", namespace, "-t", "30"))
    assert ok(magnetar(broker, "admin", "--json", "namespaces", "get-subscription-expiration-time",
                       namespace)).strip() == "30"
    topic = f"persistent://{namespace}/t"
    ok(magnetar(broker, "admin", "topics", "create", topic))
    ok(magnetar(broker, "admin", "topics", "create-subscription", topic, "-s", "s"))
    ok(magnetar(broker, "client", "produce", topic, "-m", "one"))
    assert "Cleared the backlog" in ok(magnetar(broker, "admin", "namespaces", "clear-backlog", namespace, "-s", "s"))
    ok(magnetar(broker, "admin", "namespaces", "unload", namespace))
    last = json.loads(ok(magnetar(broker, "admin", "--json", "topics", "terminate", topic)))
    assert last["entryId"] == 0 and last["partitionIndex"] == -1
    refused = magnetar(broker, "client", "produce", topic, "-m", "two")
    assert refused.returncode != 0


def test_topic_policy_verbs(broker: BrokerProcess, tenant: str) -> None:
    topic = f"persistent://public/default/{tenant}"
    ok(magnetar(broker, "admin", "topics", "create", topic))
    ok(magnetar(broker, "admin", "topics", "set-retention", topic, "-s", "10M", "-t", "2h"))
    assert json.loads(ok(magnetar(broker, "admin", "--json", "topics", "get-retention", topic))) == {
        "retentionTimeInMinutes": 120, "retentionSizeInMB": 10}
    ok(magnetar(broker, "admin", "topics", "set-message-ttl", topic, "-t", "1h"))
    ok(magnetar(broker, "admin", "topics", "set-max-producers", topic, "--max-producers", "3"))
    assert ok(magnetar(broker, "admin", "--json", "topics", "get-message-ttl", topic)).strip() == "3600"
    assert ok(magnetar(broker, "admin", "--json", "topics", "get-max-producers", topic)).strip() == "3"
    ok(magnetar(broker, "admin", "topics", "remove-max-producers", topic))
    assert ok(magnetar(broker, "admin", "--json", "topics", "get-max-producers", topic)).strip() == "null"
    assert ok(magnetar(broker, "admin", "--json", "topics", "get-max-producers", topic, "--applied")).strip() == "0"
    refused = magnetar(broker, "admin", "topics", "set-max-consumers", topic, "--max-consumers", "-1")
    assert refused.returncode != 0 and "maxConsumers must be 0 or more" in refused.stderr + refused.stdout
