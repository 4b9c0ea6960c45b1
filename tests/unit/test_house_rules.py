"""Rules of the broker's house that a reader would otherwise only find out by reading:
what the shell (server/) may call of core, what the admin REST API and the command line
may use of the shell, and how big a class may grow.

The lists below may only shrink: a change that needs a new entry is a change that puts
a rule in the shell, a door past core's facade, or new code into a class that is already
the default place for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import test_layering as layering

#: what the shell may call of core, by why it may
SERVER_MAY_USE = {
    # the broker's entry points: commands, the timer, the loaded topics and their checks
    "broker.commands", "broker.command_subjects", "broker.broker_core", "broker.broker_timers", "broker.deadlines",
    # what everything shares: settings, names, positions, errors, stats and the objects commands attach
    "broker.broker_config", "names", "positions", "errors", "stats", "topics.topic", "topics.loaded_topics",
    "topics.producer",
    "subscriptions.subscription", "subscriptions.consumer", "subscriptions.cursor_record",
    "schemas.schema_data", "schemas.versions",
    # the rule objects the shell composes and hands to commands and the admin REST
    "policies.policy_cache", "security.access_rules", "topics.topic_records", "schemas.topic_schemas",
    "broker.listeners", "policies.throttles", "policies.disk_usage", "policies.publish_throttle",
    "topics.publish", "topics.admission", "topics.topic_activity",
    # the rules whose reads and writes the shell carries out: deduplication's refresh, recovery
    # and due snapshots, the topic checks and stored properties, the compaction cursor, the
    # subscriptions restored from stored cursors
    "dedup.topic_dedup", "dedup.due_snapshots", "dedup.property_dedup", "policies.lifecycle_checks",
    "topics.topic_properties", "compaction.compaction_cursor", "subscriptions.stored_cursors",
    # still applied from the shell, to move behind the entry points: the delayed index and its
    # snapshots, compaction's run, the periodic checks
    "delayed.bucket", "delayed.shared_index_record", "delayed.bucket_snapshot_storage", "delayed.delayed_delivery",
    "compaction.compactor", "policies", "policies.limits",
    # a cluster's broker: the metadata store it opens, and core's decisions on bundle
    # ownership and lookups whose I/O the cluster membership does
    "metadata.interfaces", "metadata.records", "security.authorization",
    "cluster.bundle_ownership", "cluster.namespace_bundles", "cluster.namespace_ephemeral_data",
    "cluster.topic_lookup", "broker.broker_facade", "cluster.session_lease", "cluster.metadata_store",
    "cluster.broker_placement",
    # fencing at takeover: the ledger list and the steps that close the previous writer's ledger
    "cluster.managed_ledger_info", "cluster.topic_takeover",
    # the load manager: reports, the leader, placement, shedding and splits decided in core,
    # their store reads and writes done by the shell
    "cluster.bundle_data", "cluster.bundle_split", "cluster.bundles_data", "cluster.leader_election",
    "cluster.least_resource_usage", "cluster.load_balancer_config", "cluster.load_report",
    "cluster.stored_split",
    # a planned move: deliveries held until the consumers acknowledged what they hold
    "topics.handover",
}

#: the only modules of server/ that admin/ and cli/ may import: the HTTP ports' connections
#: (transport, which is the shell's), and the standalone broker the CLI starts. Everything
#: else of the broker they reach through core's facade (magnetar.core.broker.broker_facade).
DOORS_MAY_USE = {"magnetar.server.http_connections", "magnetar.server.standalone", "magnetar.server.cluster_broker"}
DOORS = {"admin", "cli"}

#: classes over the limit, with their size when the limit came: they may shrink, not grow
MAX_METHODS = 40
OVER_THE_LIMIT = {
}


def core_modules_used_by_server(graph: dict[str, frozenset[str]]) -> set[str]:
    return {dependency.removeprefix("magnetar.core.") for name, deps in graph.items()
            if layering.layer_of(name) == "server" for dependency in deps if layering.layer_of(dependency) == "core"}


def server_modules_used_by_doors(graph: dict[str, frozenset[str]]) -> set[str]:
    """What admin/ and cli/ import of server/ (standalone included, a layer of its own),
    and what admin/ reaches through those imports."""
    def of_server(name: str) -> bool:
        return name.startswith("magnetar.server.")
    direct = {dependency for name, deps in graph.items() if layering.layer_of(name) in DOORS
              for dependency in deps if of_server(dependency)}
    seen: set[str] = set()
    todo = [name for name in graph if layering.layer_of(name) == "admin"]
    while todo:
        for reached in graph[todo.pop()] - seen:
            seen.add(reached)
            todo.append(reached)
    return direct | {name for name in seen if of_server(name)}


def class_sizes() -> Iterator[tuple[str, int]]:
    for name, path in layering.modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)
                yield f"{name}.{node.name}", methods


def test_server_uses_only_the_listed_core_modules() -> None:
    assert core_modules_used_by_server(layering.graph()) - SERVER_MAY_USE == set()


def test_admin_and_cli_use_only_the_listed_server_modules() -> None:
    assert server_modules_used_by_doors(layering.graph()) - DOORS_MAY_USE == set()


def oversized(limit: int, known: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in class_sizes() if size > limit and size > known.get(name, limit)}


def test_no_class_grows_past_the_limit() -> None:
    assert oversized(MAX_METHODS, OVER_THE_LIMIT) == {}


def test_the_lists_hold_nothing_that_is_gone() -> None:
    """An entry that no longer applies is removed, so the lists say where things stand."""
    assert SERVER_MAY_USE - core_modules_used_by_server(layering.graph()) == set()
    assert DOORS_MAY_USE - server_modules_used_by_doors(layering.graph()) == set()
    sizes = dict(class_sizes())
    assert {name for name, size in OVER_THE_LIMIT.items() if sizes.get(name, 0) <= MAX_METHODS} == set()


def test_the_checks_can_fail() -> None:
    edges = dict(layering.graph())
    edges["magnetar.server.connection"] = edges["magnetar.server.connection"] | {"magnetar.core.key_shared.sticky_key"}
    assert "key_shared.sticky_key" in core_modules_used_by_server(edges) - SERVER_MAY_USE
    edges["magnetar.cli.admin"] = edges["magnetar.cli.admin"] | {"magnetar.server.clock"}
    edges["magnetar.server.http_connections"] = edges["magnetar.server.http_connections"] | {
        "magnetar.server.broker_service"}
    assert "magnetar.server.clock" in server_modules_used_by_doors(edges) - DOORS_MAY_USE
    assert "magnetar.server.broker_service" in server_modules_used_by_doors(edges) - DOORS_MAY_USE
    grown = {name: size - 1 for name, size in OVER_THE_LIMIT.items()}
    assert set(oversized(MAX_METHODS, grown)) == set(OVER_THE_LIMIT)


#: the one place that sets a loop timer: the alarm of the broker's one timer
TIMER_ALARM = "magnetar.server.timer_alarm"


def loop_timers_outside_the_alarm() -> set[str]:
    """Modules that call ``call_later``/``call_at`` themselves instead of the broker's timer."""
    found = set()
    for name, path in layering.modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {node.func.attr for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
        if calls & {"call_later", "call_at"} and name != TIMER_ALARM and layering.layer_of(name) != "testing":
            found.add(name)
    return found


def test_every_timer_goes_through_the_broker_timer() -> None:
    assert loop_timers_outside_the_alarm() == set()


#: objects other modules hold under these names are used through their public methods only
#: (the cluster membership's store calls, bundle reads and registration included)
PUBLIC_ONLY = {"membership"}


def private_uses(source: str) -> set[str]:
    """``membership._x`` and ``self.membership._x`` reached from outside the object's class."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        holder = node.value
        name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
        if name in PUBLIC_ONLY:
            found.add(ast.unparse(node))
    return found


def test_the_cluster_membership_is_used_through_its_public_methods() -> None:
    holders = [name for name, deps in layering.graph().items() if "magnetar.server.cluster_membership" in deps]
    assert "magnetar.server.load_manager" in holders and "magnetar.server.bundle_splits" in holders
    used = {name: uses for name in holders
            if (uses := private_uses(layering.modules()[name].read_text(encoding="utf-8")))}
    assert used == {}
    assert private_uses("await self.membership._off_loop(f)\nmembership._acquire(b)\nself._own()") == {
        "self.membership._off_loop", "membership._acquire"}
