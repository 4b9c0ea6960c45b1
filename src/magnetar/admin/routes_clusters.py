"""``/admin/v2/clusters``: list, get, create (PUT), update (POST), delete (Pulsar's ``Clusters``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from magnetar.admin.common import Broker, check_name
from magnetar.admin.errors import conflict, not_found, precondition_failed
from magnetar.admin.store_access import in_store
from magnetar.core.metadata.interfaces import BrokerMetadataStore

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
    return await in_store(broker, lambda store: store.list_clusters())


@router.get("/{cluster}", summary="Get a cluster's configuration")
async def get_cluster(broker: Broker, cluster: str) -> dict[str, Any]:
    name = check_name("cluster", cluster)
    return await in_store(broker, lambda store: _cluster_in(store, name))


@router.put("/{cluster}", status_code=204, summary="Create a cluster")
async def create_cluster(broker: Broker, cluster: str, data: ClusterData) -> None:
    check_name("cluster", cluster)

    def create(store: BrokerMetadataStore) -> None:
        if store.get_cluster(cluster) is not None:
            raise conflict("Cluster already exists")
        store.create_cluster(cluster, data.model_dump(exclude_none=True))
    await in_store(broker, create)


@router.post("/{cluster}", status_code=204, summary="Update a cluster")
async def update_cluster(broker: Broker, cluster: str, data: ClusterData) -> None:
    check_name("cluster", cluster)

    def update(store: BrokerMetadataStore) -> None:
        _cluster_in(store, cluster)
        store.update_cluster(cluster, data.model_dump(exclude_none=True))
    await in_store(broker, update)


@router.delete("/{cluster}", status_code=204, summary="Delete a cluster no tenant uses")
async def delete_cluster(broker: Broker, cluster: str) -> None:
    check_name("cluster", cluster)
    local = broker.config.clusterName

    def delete(store: BrokerMetadataStore) -> None:
        _cluster_in(store, cluster)
        if cluster == local:
            raise precondition_failed(f"Cluster {cluster} is the cluster this broker serves")
        for tenant in store.list_tenants():
            info = store.get_tenant(tenant) or {}
            if cluster in (info.get("allowedClusters") or []):
                raise precondition_failed(f"Cluster {cluster} is still used by tenant {tenant}")
        store.delete_cluster(cluster)
    await in_store(broker, delete)


def _cluster_in(store: BrokerMetadataStore, cluster: str) -> dict[str, Any]:
    data = store.get_cluster(cluster)
    if data is None:
        raise not_found("Cluster does not exist")
    return data
