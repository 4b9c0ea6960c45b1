"""The ``magnetar`` command: ``standalone``, ``broker``, ``initialize-cluster-metadata``,
``local-cluster``, and the
``admin``, ``client``, ``perf`` and ``tokens`` groups."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from magnetar.cli import admin_cluster  # noqa: F401 - its commands join the admin app's groups
from magnetar.cli.admin import admin_app
from magnetar.cli.client import client_app
from magnetar.cli.perf import perf_app
from magnetar.cli.spark_admin import spark_app
from magnetar.cli.tokens import tokens_app
from magnetar.config import load_config
from magnetar.core.broker.broker_config import BrokerConfig, ConfigError

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


ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="standalone.conf / broker.conf file")]
SetOption = Annotated[list[str] | None, typer.Option("--set", help="override a config key: key=value")]
LogLevelOption = Annotated[str, typer.Option("--log-level")]


@app.command()
def standalone(
    config: ConfigOption = None,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where topics and metadata live")] = Path("data"),
    set_: SetOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    """Start a broker with embedded storage: pulsar:// on 6650, HTTP on 8080, data under ./data."""
    broker_config = _broker_config(config, set_, log_level)
    if broker_config.metadataStoreUrl:
        _fail(f"metadataStoreUrl={broker_config.metadataStoreUrl}: the standalone broker keeps its metadata in "
              "SQLite under --data-dir; leave metadataStoreUrl empty (or run magnetar broker)")
    from magnetar.server.standalone import run_standalone
    _start(lambda: run_standalone(broker_config, data_dir))


@app.command()
def broker(
    config: ConfigOption = None,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="the ledgers' directory, shared by every broker "
                                                               "of the cluster")] = Path("data"),
    set_: SetOption = None,
    log_level: LogLevelOption = "INFO",
) -> None:
    """Start one broker of a cluster: metadata in the store metadataStoreUrl names (ZooKeeper),
    ledgers under --data-dir."""
    broker_config = _broker_config(config, set_, log_level)
    if not broker_config.metadataStoreUrl:
        _fail("a cluster's broker needs metadataStoreUrl, e.g. --set metadataStoreUrl=zk:127.0.0.1:2181 "
              "(without one, run magnetar standalone)")
    from magnetar.server.cluster_broker import run_broker
    _start(lambda: run_broker(broker_config, data_dir))


@app.command("initialize-cluster-metadata")
def initialize_cluster_metadata(
    cluster: Annotated[str, typer.Option("--cluster", help="the cluster's name (the brokers' clusterName)")],
    metadata_store: Annotated[str, typer.Option("--metadata-store", help="zk:host:port[,host:port...][/chroot]")],
    web_service_url: Annotated[str | None, typer.Option("--web-service-url")] = None,
    broker_service_url: Annotated[str | None, typer.Option("--broker-service-url")] = None,
    web_service_url_tls: Annotated[str | None, typer.Option("--web-service-url-tls")] = None,
    broker_service_url_tls: Annotated[str | None, typer.Option("--broker-service-url-tls")] = None,
) -> None:
    """Create a cluster's records in its metadata store: the cluster, the public tenant and the
    public/default namespace (Pulsar's command and flags). Records already there are kept."""
    from magnetar.cli.cluster_init import ClusterInit, initialize
    from magnetar.core.metadata.records import MetadataError
    try:
        created = initialize(ClusterInit(cluster, metadata_store, web_service_url, broker_service_url,
                                         web_service_url_tls, broker_service_url_tls))
    except (ValueError, MetadataError) as exc:
        _fail(str(exc))
    for line in created:
        typer.echo(line)


@app.command("local-cluster")
def local_cluster(
    brokers: Annotated[int, typer.Option("--brokers", help="how many brokers")],
    metadata_store: Annotated[str | None, typer.Option(
        "--metadata-store", help="a running ZooKeeper, zk:host:port[/chroot]; none: start one")] = None,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="the brokers' shared data directory (and "
                                                               "ZooKeeper's, logs)")] = Path("cluster-data"),
    cluster: Annotated[str, typer.Option("--cluster", help="the cluster's name")] = "local-cluster",
    base_port: Annotated[int, typer.Option("--base-port", help="broker i serves pulsar:// on base+2i and "
                                                                "http:// on base+2i+1")] = 6650,
) -> None:
    """Try a cluster on one machine: a ZooKeeper and N brokers over one data directory, until Ctrl-C."""
    from magnetar.cli.local_cluster import LocalClusterPlan, run_local_cluster
    from magnetar.core.metadata.records import MetadataError
    try:
        code = run_local_cluster(LocalClusterPlan(brokers, data_dir, cluster, base_port, metadata_store),
                                 lambda line: typer.echo(line))
    except ValueError as exc:
        _fail(str(exc))
    except (RuntimeError, TimeoutError, MetadataError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _broker_config(config: Path | None, set_: list[str] | None, log_level: str) -> BrokerConfig:
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
        return load_config(config, overrides)
    except ConfigError as exc:
        _fail(str(exc))


def _start(run: Callable[[], None]) -> None:
    from magnetar.core.metadata.records import MetadataError
    try:
        run()
    except (ConfigError, MetadataError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot start: {exc}")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def main() -> None:
    app()
