"""Rules of the broker's house that a reader would otherwise only find out by reading:
what the shell (server/) may call of core, and how big a class may grow.

Both lists below may only shrink: a change that needs a new entry is a change that puts
a rule in the shell or new code into a class that is already the default place for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import test_layering as layering

#: what the shell may call of core, by why it may
SERVER_MAY_USE = {
    # the broker's entry points: commands, the timer, the loaded topics and their checks
    "broker.commands", "broker.broker_core", "broker.broker_timers", "broker.deadlines",
    # what everything shares: settings, names, positions, errors and the objects commands attach
    "broker.broker_config", "names", "positions", "errors", "entry", "topics.topic", "topics.producer",
    "subscriptions.subscription", "subscriptions.consumer", "subscriptions.cursor_record",
    "schemas.schema_data", "schemas.versions",
    # the rule objects the shell composes and hands to commands and the admin REST
    "policies.policy_cache", "security.access_rules", "topics.topic_records", "schemas.topic_schemas",
    "broker.listeners", "policies.throttles", "policies.disk_usage", "policies.publish_throttle",
    "topics.publish", "topics.admission", "topics.topic_activity",
    # still applied from the shell, to move behind the entry points: deduplication's refresh
    # and snapshots, the delayed index and its snapshots, compaction, the periodic checks
    "dedup.dedup_snapshot", "dedup.deduplication_config", "dedup.message_deduplication", "dedup.due_snapshots",
    "dedup.property_dedup_window", "delayed.bucket", "delayed.shared_index_record",
    "delayed.bucket_snapshot_storage", "delayed.delayed_delivery", "compaction.compacted_topic",
    "compaction.compactor", "policies", "policies.backlog_quota", "policies.inactive_topics", "policies.limits",
}

#: classes over the limit, with their size when the limit came: they may shrink, not grow
MAX_METHODS = 40
OVER_THE_LIMIT = {
    "magnetar.testing.sim.world.World": 42,
    "magnetar.testing.sim.command_world.CommandWorld": 45,
    "magnetar.testing.sim.broker_world.BrokerWorld": 43,
}


def core_modules_used_by_server(graph: dict[str, frozenset[str]]) -> set[str]:
    return {dependency.removeprefix("magnetar.core.") for name, deps in graph.items()
            if layering.layer_of(name) == "server" for dependency in deps if layering.layer_of(dependency) == "core"}


def class_sizes() -> Iterator[tuple[str, int]]:
    for name, path in layering.modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)
                yield f"{name}.{node.name}", methods


def test_server_uses_only_the_listed_core_modules() -> None:
    assert core_modules_used_by_server(layering.graph()) - SERVER_MAY_USE == set()


def oversized(limit: int, known: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in class_sizes() if size > limit and size > known.get(name, limit)}


def test_no_class_grows_past_the_limit() -> None:
    assert oversized(MAX_METHODS, OVER_THE_LIMIT) == {}


def test_the_lists_hold_nothing_that_is_gone() -> None:
    """An entry that no longer applies is removed, so the lists say where things stand."""
    assert SERVER_MAY_USE - core_modules_used_by_server(layering.graph()) == set()
    sizes = dict(class_sizes())
    assert {name for name, size in OVER_THE_LIMIT.items() if sizes.get(name, 0) <= MAX_METHODS} == set()


def test_the_checks_can_fail() -> None:
    edges = dict(layering.graph())
    edges["magnetar.server.connection"] = edges["magnetar.server.connection"] | {"magnetar.core.key_shared.sticky_key"}
    assert "key_shared.sticky_key" in core_modules_used_by_server(edges) - SERVER_MAY_USE
    grown = {name: size - 1 for name, size in OVER_THE_LIMIT.items()}
    assert set(oversized(MAX_METHODS, grown)) == set(OVER_THE_LIMIT)
