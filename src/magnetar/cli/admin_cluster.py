"""``magnetar admin`` commands for a cluster's load manager and bundles (Pulsar's
``pulsar-admin brokers leader-broker``, ``broker-stats load-report``,
``namespaces bundles``, ``namespaces split-bundle``)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer

from magnetar.cli.admin import _act, _show, brokers_app, namespace_path, namespaces_app
from magnetar.cli.output import fail

SPLIT_ALGORITHMS = ("range_equally_divide", "topic_count_equally_divide")


@brokers_app.command("leader")
def brokers_leader(ctx: typer.Context) -> None:
    """Show the load manager's leader (Pulsar's leader-broker)."""
    _show(ctx, "/admin/v2/brokers/leaderBroker")


@brokers_app.command("load")
def brokers_load(ctx: typer.Context) -> None:
    """Show the broker's load report (CPU, bandwidth, rates, bundles)."""
    _show(ctx, "/admin/v2/broker-stats/load-report")


@brokers_app.command("owned-bundles")
def brokers_owned_bundles(ctx: typer.Context, cluster: str, broker: str) -> None:
    """List the bundles a broker (host:port of its web service) owns."""
    _show(ctx, f"/admin/v2/brokers/{quote(cluster, safe='')}/{quote(broker, safe='')}/ownedNamespaces")


@namespaces_app.command("bundles")
def namespaces_bundles(ctx: typer.Context, namespace: str) -> None:
    """Show the namespace's bundle boundaries."""
    _show(ctx, f"{namespace_path(namespace)}/bundles")


@namespaces_app.command("split-bundle")
def namespaces_split_bundle(
        ctx: typer.Context, namespace: str,
        bundle: Annotated[str, typer.Option("--bundle", "-b", help="the range, 0x00000000_0x40000000")],
        unload: Annotated[bool, typer.Option("--unload", "-u", help="unload the halves after the split")] = False,
        algorithm: Annotated[str, typer.Option("--split-algorithm-name", "-san",
                                               help="range_equally_divide or topic_count_equally_divide")]
        = "range_equally_divide") -> None:
    """Split a bundle in two."""
    if algorithm not in SPLIT_ALGORITHMS:
        fail(f"invalid --split-algorithm-name {algorithm!r}: use one of {', '.join(SPLIT_ALGORITHMS)}")
    lower, sep, upper = bundle.partition("_")
    if not sep or not lower.startswith("0x") or not upper.startswith("0x"):
        fail(f"invalid --bundle {bundle!r}: expected 0x<lower>_0x<upper>")
    _act(ctx, "PUT", f"{namespace_path(namespace)}/{quote(bundle, safe='')}/split",
         params={"unload": str(unload).lower(), "splitAlgorithmName": algorithm},
         done=f"Split bundle {bundle} of {namespace}")
