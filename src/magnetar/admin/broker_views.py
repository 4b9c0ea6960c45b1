"""``GET /admin/v2/broker-stats/brokers`` (Magnetar only): the brokers of this broker's
cluster, each with the bundles it owns and its load report, for the console's overview.

Each broker is asked itself, through the admin API every broker serves
(``/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces`` and
``/admin/v2/broker-stats/load-report``), with the caller's credentials, as an unload of a
namespace asks each bundle's owner; this broker answers for itself without a request. A
broker that does not answer, or answers an error, is listed with the reason and without
the figures it could not give. A standalone broker lists itself alone (``clustered``
false).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import APIRouter, Request

from magnetar.admin.common import Broker
from magnetar.admin.rate_history import RateHistory, load_report
from magnetar.admin.routes_brokers import owned_bundles, standalone_id

#: how long another broker may take to answer, each request
PEER_TIMEOUT_S = 5.0


def _entry(broker_id: str, web_url: str | None, me: bool) -> dict[str, Any]:
    return {"brokerId": broker_id, "webServiceUrl": web_url, "self": me,
            "consoleUrl": None if web_url is None else web_url.rstrip("/") + "/console/",
            "ownedBundles": None, "loadReport": None, "error": None}


async def _ask(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    response = await http.get(url, headers=headers)
    if response.status_code != 200:
        raise LookupError(f"{url} answered {response.status_code}: {response.text[:200]}")
    return response.json()


async def _peer(http: httpx.AsyncClient, cluster: str, broker_id: str, web_url: str | None,
                headers: dict[str, str]) -> dict[str, Any]:
    entry = _entry(broker_id, web_url, me=False)
    if web_url is None:
        entry["error"] = "not registered any more"
        return entry
    base = web_url.rstrip("/")
    try:
        owned = await _ask(http, f"{base}/admin/v2/brokers/{cluster}/{broker_id}/ownedNamespaces", headers)
        entry["ownedBundles"] = sorted(owned)
        entry["loadReport"] = await _ask(http, f"{base}/admin/v2/broker-stats/load-report", headers)
    except (httpx.HTTPError, LookupError, ValueError) as exc:
        entry["error"] = str(exc) or type(exc).__name__
    return entry


def make_router(history: RateHistory) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/broker-stats", tags=["broker-stats"])

    @router.get("/brokers", summary="The cluster's brokers, each with its owned bundles and load report")
    async def brokers(broker: Broker, request: Request) -> dict[str, Any]:
        cluster = broker.config.clusterName
        owners = broker.cluster
        report = await load_report(broker, history)
        if owners is None:
            me = _entry(standalone_id(broker), report["webServiceUrl"], me=True)
        else:
            me = _entry(owners.broker_id, await owners.web_url_of(owners.broker_id) or report["webServiceUrl"], me=True)
        me["ownedBundles"] = await owned_bundles(broker)
        me["loadReport"] = report
        if owners is None:
            return {"clusterName": cluster, "clustered": False, "brokers": [me]}
        authorization = request.headers.get("authorization")
        headers = {} if authorization is None else {"authorization": authorization}
        others = [b for b in await owners.broker_ids() if b != owners.broker_id]
        urls = [await owners.web_url_of(b) for b in others]
        async with httpx.AsyncClient(timeout=PEER_TIMEOUT_S) as http:
            peers = await asyncio.gather(*(_peer(http, cluster, b, url, headers)
                                           for b, url in zip(others, urls, strict=True)))
        listed = sorted([me, *peers], key=lambda entry: entry["brokerId"])
        return {"clusterName": cluster, "clustered": True, "brokers": listed}

    return router
