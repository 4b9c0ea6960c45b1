"""``/admin/v2/clusters``: list, get, create (PUT), update (POST), delete (Pulsar's ``Clusters``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from magnetar.admin.common import Broker, check_name
from magnetar.admin.errors import conflict, not_found, precondition_failed

router = APIRouter(prefix="/admin/v2/clusters", tags=["clusters"])


class ClusterData(BaseModel):
    """Pulsar's ``ClusterData``; fields Magnetar does not use are kept as given."""

    model_config = ConfigDict(extra="allow")
    serviceUrl: str | None = None
    serviceUrlTls: str | None = None
    brokerServiceUrl: str | None = None
    brokerServiceUrlTls: str | None = None
    proxyServiceUrl: str | None = None
    peerClusterNames: list[str] | None = None


@router.get("", summary="List clusters")
async def list_clusters(broker: Broker) -> list[str]:
    return broker.metadata.list_clusters()


@router.get("/{cluster}", summary="Get a cluster's configuration")
async def get_cluster(broker: Broker, cluster: str) -> dict[str, Any]:
    data = broker.metadata.get_cluster(check_name("cluster", cluster))
    if data is None:
        raise not_found("Cluster does not exist")
    return data


@router.put("/{cluster}", status_code=204, summary="Create a cluster")
async def create_cluster(broker: Broker, cluster: str, data: ClusterData) -> None:
    check_name("cluster", cluster)
    if broker.metadata.get_cluster(cluster) is not None:
        raise conflict("Cluster already exists")
    broker.metadata.create_cluster(cluster, data.model_dump(exclude_none=True))


@router.post("/{cluster}", status_code=204, summary="Update a cluster")
async def update_cluster(broker: Broker, cluster: str, data: ClusterData) -> None:
    check_name("cluster", cluster)
    if broker.metadata.get_cluster(cluster) is None:
        raise not_found("Cluster does not exist")
    broker.metadata.update_cluster(cluster, data.model_dump(exclude_none=True))


@router.delete("/{cluster}", status_code=204, summary="Delete a cluster no tenant uses")
async def delete_cluster(broker: Broker, cluster: str) -> None:
    check_name("cluster", cluster)
    if broker.metadata.get_cluster(cluster) is None:
        raise not_found("Cluster does not exist")
    if cluster == broker.config.clusterName:
        raise precondition_failed(f"Cluster {cluster} is the cluster this broker serves")
    for tenant in broker.metadata.list_tenants():
        info = broker.metadata.get_tenant(tenant) or {}
        if cluster in (info.get("allowedClusters") or []):
            raise precondition_failed(f"Cluster {cluster} is still used by tenant {tenant}")
    broker.metadata.delete_cluster(cluster)
