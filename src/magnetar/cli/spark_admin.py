"""``magnetar admin spark``: the durable subscriptions streaming queries keep, found from a checkpoint.

A streaming query reading Magnetar holds its unread messages with one durable subscription
per topic partition (``magnetar.spark.holding``); its name and partitions are in the
offsets the query checkpoints (``<checkpoint>/offsets/<batch id>``). When a pipeline is
retired, its subscriptions would keep holding data for ever: ``remove-subscriptions``
deletes them. Reads the checkpoint as plain files, so it needs no Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from magnetar.cli.admin import ForceOption, _admin_of, topic_path
from magnetar.cli.output import fail, print_json, print_rows

spark_app = typer.Typer(help="Durable subscriptions of Spark streaming queries.", no_args_is_help=True)

CheckpointArg = Annotated[Path, typer.Argument(help="the query's checkpointLocation (a local or mounted path)")]


@dataclass(frozen=True)
class QuerySubscription:
    """One source of a checkpointed query: its subscription name and the partitions it holds."""

    name: str
    topics: tuple[str, ...]


def checkpointed_subscriptions(checkpoint: Path) -> list[QuerySubscription]:
    """The Magnetar sources' subscriptions in the latest offsets a checkpoint holds."""
    offsets = checkpoint / "offsets"
    if not offsets.is_dir():
        raise ValueError(f"{checkpoint} is not a streaming checkpoint: it has no offsets/ folder")
    batches = sorted((int(p.name), p) for p in offsets.iterdir() if p.name.isdigit())
    if not batches:
        raise ValueError(f"{checkpoint} holds no offsets yet: the query never planned a batch")
    lines = batches[-1][1].read_text().splitlines()
    found: list[QuerySubscription] = []
    for line in lines[2:]:  # the version, the batch metadata, then one offset per source
        try:
            doc: Any = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, str):  # a source that wrote its offset as a JSON string
            try:
                doc = json.loads(doc)
            except json.JSONDecodeError:
                continue
        if isinstance(doc, dict) and isinstance(doc.get("subscription"), str) and isinstance(doc.get("topics"), dict):
            found.append(QuerySubscription(doc["subscription"], tuple(sorted(doc["topics"]))))
    if not found:
        raise ValueError(f"the latest offsets of {checkpoint} ({batches[-1][1]}) name no Magnetar subscription "
                         "(a query started before subscriptions were kept, or one that reads no Magnetar topic)")
    return found


def _of_checkpoint(checkpoint: Path) -> list[QuerySubscription]:
    try:
        return checkpointed_subscriptions(checkpoint)
    except (OSError, ValueError) as exc:
        fail(str(exc))


@spark_app.command("subscriptions")
def spark_subscriptions(ctx: typer.Context, checkpoint: CheckpointArg) -> None:
    """The query's subscriptions: name, topic partition and backlog (messages held)."""
    admin = _admin_of(ctx)
    rows: list[dict[str, Any]] = []
    for query in _of_checkpoint(checkpoint):
        for topic in query.topics:
            _, path = topic_path(topic)
            response = admin.call("GET", f"{path}/stats", missing_ok=True)
            held = response.json().get("subscriptions", {}).get(query.name) if response.status_code == 200 else None
            rows.append({"subscription": query.name, "topic": topic,
                         "msgBacklog": held.get("msgBacklog") if isinstance(held, dict) else "(none)"})
    if admin.json_output:
        print_json(rows)
    else:
        print_rows(rows, ["subscription", "topic", "msgBacklog"])


@spark_app.command("remove-subscriptions")
def spark_remove_subscriptions(ctx: typer.Context, checkpoint: CheckpointArg, force: ForceOption = False) -> None:
    """Delete a retired query's subscriptions, so the broker stops holding its data.

    Stop the query first: a running query makes them again at its next batch."""
    admin = _admin_of(ctx)
    for query in _of_checkpoint(checkpoint):
        for topic in query.topics:
            _, path = topic_path(topic)
            response = admin.call("DELETE", f"{path}/subscription/{quote(query.name, safe='')}",
                                  params={"force": force}, missing_ok=True)
            if response.status_code == 404:
                admin.done(f"No subscription {query.name} on {topic} (already removed)")
            else:
                admin.done(f"Deleted subscription {query.name} on {topic}")
