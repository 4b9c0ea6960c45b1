"""The load manager's routes: the leader (``GET /admin/v2/brokers/leaderBroker``) and bundle
splits (``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/split``), as Pulsar's.

A split is made by the bundle's owner; another broker of a cluster answers 307 to it. A
standalone broker owns every bundle: it writes the new boundaries, and unloads the topics
of the split bundle when asked to (``unload=true``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from magnetar.admin.common import Broker, namespace_name, require_namespace
from magnetar.admin.errors import RestError, conflict, not_found, precondition_failed
from magnetar.core.cluster.bundle_split import SPLIT_ALGORITHMS, SplitRefused
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle
from magnetar.core.cluster.stored_split import split_in_store
from magnetar.core.metadata.records import VersionConflict

router = APIRouter(tags=["load-balancing"])


@router.get("/admin/v2/brokers/leaderBroker", summary="The load manager's leader (Pulsar's LeaderBroker)")
async def leader_broker(broker: Broker) -> dict[str, Any]:
    owners = broker.cluster
    if owners is None:  # a standalone broker leads itself
        config = broker.config
        broker_id = f"{config.advertisedAddress}:{config.webServicePort or config.webServicePortTls}"
        return {"brokerId": broker_id, "serviceUrl": f"http://{broker_id}"}
    leader = None if owners.load_balancing is None else owners.load_balancing.leader_broker()
    if leader is None:
        raise not_found("No leader is elected yet")
    return leader


@router.put("/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split", status_code=204, response_model=None,
            summary="Split a bundle in two (Pulsar's split algorithms range_equally_divide and "
                    "topic_count_equally_divide)")
async def split_namespace_bundle(broker: Broker, request: Request, tenant: str, namespace: str, bundle: str,
                                 unload: bool = False, splitAlgorithmName: str | None = None) \
        -> RedirectResponse | None:
    name = namespace_name(tenant, namespace)
    policies = await require_namespace(broker, name)
    algorithm = splitAlgorithmName or "range_equally_divide"
    if algorithm not in SPLIT_ALGORITHMS:
        raise precondition_failed(f"Unsupported namespace bundle split algorithm {algorithm!r}, supported "
                                  f"algorithms are {list(SPLIT_ALGORITHMS)}")
    try:
        unit = NamespaceBundle.parse(name, bundle)
        if unit not in bundles_of(name, policies).bundles:
            raise precondition_failed(f"Bundle {bundle} is not a bundle of {name}")
        owners = broker.cluster
        if owners is None:  # on the metadata writer's thread: a SQLite commit and its fsync
            await asyncio.wrap_future(broker.writer.submit(
                lambda store: split_in_store(store, unit, algorithm, store.list_topics(name))))
            await _unload_standalone(broker, unit, unload)
            return None
        if owners.load_balancing is None:
            raise RestError(503, "The load manager is not running yet")
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        redirect = await owners.load_balancing.split_bundle(unit, algorithm, unload, path)
    except InvalidBundle as exc:
        raise precondition_failed(str(exc)) from None
    except (SplitRefused, VersionConflict) as exc:
        raise conflict(str(exc)) from None
    return None if redirect is None else RedirectResponse(redirect.location, status_code=redirect.status)


async def _unload_standalone(broker: Broker, unit: NamespaceBundle, unload: bool) -> None:
    if unload:
        for topic in [t for t in broker.topics.values() if t.name.namespace_name == unit.namespace]:
            if unit.includes(str(topic.name)):
                await broker.release.unload_topic(topic.name)
