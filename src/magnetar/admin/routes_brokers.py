"""``/admin/v2/brokers``: health, readiness, runtime configuration, active brokers and the
bundles each owns."""

from __future__ import annotations

import os
import signal
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse

from magnetar.admin.common import PLAIN_TEXT, Broker, check_name, every_namespace
from magnetar.admin.errors import RestError, not_found
from magnetar.admin.store_access import in_store
from magnetar.core.broker.broker_config import SENSITIVE_KEYS
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.metadata.interfaces import BrokerMetadataStore

router = APIRouter(prefix="/admin/v2/brokers", tags=["brokers"])


@router.get("/health", response_class=PlainTextResponse, responses=PLAIN_TEXT, summary="Broker health check")
async def health(broker: Broker) -> str:
    refusal = broker.disk.refusal()
    if refusal is not None:
        raise RestError(503, refusal)
    return "ok"


@router.get("/ready", response_class=PlainTextResponse, responses=PLAIN_TEXT,
            summary="Whether the broker has started and serves requests")
async def ready(broker: Broker) -> str:
    if not broker.ready:
        raise RestError(503, "Broker is not ready")
    return "ok"


@router.get("/configuration/runtime", summary="Every configuration value the broker runs with")
async def runtime_configuration(broker: Broker) -> dict[str, str]:
    values = {key: "****" if key in SENSITIVE_KEYS and value else _text(value)
              for key, value in broker.config.as_dict().items()}
    values.update(broker.config.extra)
    return dict(sorted(values.items()))


@router.get("/configuration", summary="Names of the dynamic configuration keys (none in Magnetar)")
async def dynamic_configuration_names(broker: Broker) -> list[str]:
    return []


@router.post("/shutdown", status_code=204, response_model=None,
             summary="Stop this broker gracefully: its bundles are handed to the other brokers first")
async def shutdown(background: BackgroundTasks,
                   max_concurrent_unload_per_sec: Annotated[int, Query(alias="maxConcurrentUnloadPerSec")] = 0,
                   forced_terminate_topic: Annotated[bool, Query(alias="forcedTerminateTopic")] = True) -> None:
    """Pulsar's graceful shutdown, the step of a rolling restart: the same path as SIGTERM
    (the bundles are handed over, their consumers drained, then the process exits), taken
    once this answer has gone out. Magnetar hands bundles over side by side, so
    ``maxConcurrentUnloadPerSec`` is accepted and not used."""
    if max_concurrent_unload_per_sec < 0:
        raise RestError(412, "maxConcurrentUnloadPerSec must not be negative")
    background.add_task(os.kill, os.getpid(), signal.SIGTERM)


@router.get("/{cluster}", summary="List the active brokers of a cluster")
async def active_brokers(broker: Broker, cluster: str) -> list[str]:
    await require_cluster(broker, cluster)
    if cluster != broker.config.clusterName:
        return []
    if broker.cluster is not None:
        return await broker.cluster.broker_ids()
    return [standalone_id(broker)]


@router.get("/{cluster}/{broker_id}/ownedNamespaces", response_model=None,
            summary="The namespace bundles a broker owns")
async def owned_namespaces(broker: Broker, request: Request, cluster: str,
                           broker_id: str) -> dict[str, dict[str, Any]] | RedirectResponse:
    await require_cluster(broker, cluster)
    owners = broker.cluster
    me = standalone_id(broker) if owners is None else owners.broker_id
    if broker_id != me:
        url = None if owners is None or cluster != broker.config.clusterName else await owners.web_url_of(broker_id)
        if url is None:
            raise not_found(f"Broker {broker_id} is not a registered broker of cluster {cluster}")
        return RedirectResponse(url.rstrip("/") + request.url.path, status_code=307)
    # Pulsar's NamespaceOwnershipStatus of each bundle
    return {bundle: {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
            for bundle in await owned_bundles(broker)}


async def require_cluster(broker: Broker, cluster: str) -> None:
    name = check_name("cluster", cluster)
    if await in_store(broker, lambda store: store.get_cluster(name)) is None:
        raise not_found("Cluster does not exist")


async def owned_bundles(broker: Broker) -> list[str]:
    """The bundles this broker owns, sorted: on a standalone broker, every bundle of every namespace."""
    if broker.cluster is not None:
        return sorted(broker.cluster.owned_bundles())
    return await in_store(broker, _every_bundle)


def _every_bundle(store: BrokerMetadataStore) -> list[str]:
    return sorted(str(bundle) for namespace in every_namespace(store)
                  for bundle in bundles_of(namespace, store.get_namespace_policies(namespace)).bundles)


def standalone_id(broker: Broker) -> str:
    """A standalone broker's id: its advertised address and web port."""
    return f"{broker.config.advertisedAddress}:{broker.config.webServicePort or broker.config.webServicePortTls}"


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
