"""Geo-replication and tiered-storage offload: refused, never stored and ignored.

Magnetar serves one cluster and keeps every ledger on local disk. Pulsar's endpoints for
replication clusters and offload answer here so a tool that sets them learns at once that
nothing would happen: replication to the local cluster alone is accepted (it is what a
namespace has anyway), to a cluster that does not exist is Pulsar's 403 "Invalid cluster
id", to another known cluster 412; offload settings and triggers are 412. Reads answer
what is true: the local cluster, no offload.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from magnetar.admin.common import Broker, namespace_in, namespace_name, require_namespace
from magnetar.admin.errors import RestError, precondition_failed
from magnetar.admin.store_access import in_store
from magnetar.core.metadata.interfaces import BrokerMetadataStore

OFFLOAD_REFUSED = "Tiered storage offload is not supported: Magnetar keeps every ledger on local disk"


def check_replication_clusters(store: BrokerMetadataStore, local: str, clusters: list[str]) -> None:
    """Pulsar's checks of a replication cluster list, then Magnetar's: only the local cluster
    (a call of :func:`~magnetar.admin.store_access.in_store`)."""
    if "global" in clusters:
        raise precondition_failed("Cannot specify global in the list of replication clusters")
    known = set(store.list_clusters())
    for cluster in clusters:
        if cluster not in known:
            raise RestError(403, f"Invalid cluster id: {cluster}")
    others = sorted(set(clusters) - {local})
    if others:
        raise precondition_failed(f"Geo-replication is not supported: this broker serves only cluster {local}, "
                                  f"not {', '.join(others)}")


def check_unsupported_policies(store: BrokerMetadataStore, local: str, policies: dict[str, Any]) -> None:
    """A namespace created with replication or offload settings Magnetar cannot apply is
    refused rather than stored."""
    clusters = policies.get("replication_clusters")
    if clusters:
        check_replication_clusters(store, local, list(clusters))
    if policies.get("offload_threshold", -1) not in (-1, None) or any(
            policies.get(field) is not None for field in
            ("offload_policies", "offload_deletion_lag_ms", "offload_threshold_in_seconds")):
        raise precondition_failed(OFFLOAD_REFUSED)


namespace_router = APIRouter(prefix="/admin/v2/namespaces/{tenant}/{namespace}", tags=["namespaces"])


@namespace_router.get("/replication", summary="The namespace's replication clusters (the local cluster)")
async def get_replication(broker: Broker, tenant: str, namespace: str) -> list[str]:
    await require_namespace(broker, namespace_name(tenant, namespace))
    return [broker.config.clusterName]


@namespace_router.post("/replication", status_code=204,
                       summary="Set replication clusters: only the local cluster is accepted")
async def set_replication(broker: Broker, tenant: str, namespace: str,
                          clusters: Annotated[list[str], Body()]) -> None:
    name = namespace_name(tenant, namespace)
    local = broker.config.clusterName

    def check(store: BrokerMetadataStore) -> None:
        namespace_in(store, name)
        check_replication_clusters(store, local, clusters)
    await in_store(broker, check)


@namespace_router.get("/offloadThreshold", summary="Offload threshold (-1: offload off)")
async def get_offload_threshold(broker: Broker, tenant: str, namespace: str) -> int:
    await require_namespace(broker, namespace_name(tenant, namespace))
    return -1


@namespace_router.get("/offloadPolicies", summary="Offload policies (none)")
async def get_offload_policies(broker: Broker, tenant: str, namespace: str) -> None:
    await require_namespace(broker, namespace_name(tenant, namespace))


def _refuse_offload(path: str) -> None:
    async def refuse(broker: Broker, tenant: str, namespace: str) -> None:
        await require_namespace(broker, namespace_name(tenant, namespace))
        raise precondition_failed(OFFLOAD_REFUSED)
    for method in ("POST", "PUT", "DELETE"):
        namespace_router.add_api_route(path, refuse, methods=[method], status_code=204,
                                       summary="Refused: offload is not supported", name=f"{method} {path}")


for _path in ("/offloadThreshold", "/offloadThresholdInSeconds", "/offloadDeletionLagMs", "/offloadPolicies"):
    _refuse_offload(_path)


def make_topic_router(domain: str) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}", tags=["topics"])

    async def refuse(tenant: str, namespace: str, topic: str) -> None:
        raise precondition_failed(OFFLOAD_REFUSED)
    for path, methods in (("/offload", ("PUT",)), ("/offloadPolicies", ("POST", "DELETE"))):
        for method in methods:
            router.add_api_route(path, refuse, methods=[method], status_code=204,
                                 summary="Refused: offload is not supported", name=f"{domain} {method} {path}")
    return router
