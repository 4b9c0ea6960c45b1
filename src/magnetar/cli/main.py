"""The ``magnetar`` command: ``standalone``, and the ``admin``, ``client``, ``perf`` and ``tokens`` groups."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from magnetar.cli.admin import admin_app
from magnetar.cli.client import client_app
from magnetar.cli.perf import perf_app
from magnetar.cli.spark_admin import spark_app
from magnetar.cli.tokens import tokens_app
from magnetar.config import load_config
from magnetar.core.broker.broker_config import ConfigError

app = typer.Typer(help="Magnetar: a Pulsar-compatible message broker.", no_args_is_help=True,
                  add_completion=False)
admin_app.add_typer(spark_app, name="spark")
app.add_typer(admin_app, name="admin")
app.add_typer(client_app, name="client")
app.add_typer(perf_app, name="perf")
app.add_typer(tokens_app, name="tokens")


@app.callback()
def _root() -> None:
    """Magnetar: a Pulsar-compatible message broker."""


@app.command()
def standalone(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="standalone.conf / broker.conf file")] = None,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where topics and metadata live")] = Path("data"),
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config key: key=value")] = None,
    log_level: Annotated[str, typer.Option("--log-level")] = "INFO",
) -> None:
    """Start a broker with embedded storage: pulsar:// on 6650, HTTP on 8080, data under ./data."""
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        _fail(f"--log-level {log_level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, str] = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--set expects key=value, got {item!r}")
        overrides[key.strip()] = value
    try:
        broker_config = load_config(config, overrides)
    except ConfigError as exc:
        _fail(str(exc))
    if broker_config.metadataStoreUrl:
        _fail(f"metadataStoreUrl={broker_config.metadataStoreUrl}: the standalone broker keeps its metadata in "
              "SQLite under --data-dir; leave metadataStoreUrl empty")
    from magnetar.server.standalone import run_standalone
    try:
        run_standalone(broker_config, data_dir)
    except ConfigError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot start: {exc}")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def main() -> None:
    app()
