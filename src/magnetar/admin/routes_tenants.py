"""``/admin/v2/tenants``: list, get, create (PUT), update (POST), delete (Pulsar's ``Tenants``)."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from magnetar.admin.common import Broker, check_name, namespaces_in, require_tenant, tenant_in
from magnetar.admin.errors import conflict, precondition_failed
from magnetar.admin.namespace_ops import delete_namespace_contents
from magnetar.admin.store_access import in_store
from magnetar.core.metadata.interfaces import BrokerMetadataStore

router = APIRouter(prefix="/admin/v2/tenants", tags=["tenants"])


class TenantInfo(BaseModel):
    """Pulsar's ``TenantInfo``."""

    model_config = ConfigDict(extra="forbid")
    adminRoles: list[str] = []
    allowedClusters: list[str] = []


def _check_clusters(store: BrokerMetadataStore, info: TenantInfo) -> None:
    missing = [c for c in info.allowedClusters if store.get_cluster(c) is None]
    if missing:
        raise precondition_failed(f"Clusters do not exist: {', '.join(sorted(missing))}")


@router.get("", summary="List tenants")
async def list_tenants(broker: Broker) -> list[str]:
    return await in_store(broker, lambda store: store.list_tenants())


@router.get("/{tenant}", summary="Get a tenant's admin roles and allowed clusters")
async def get_tenant(broker: Broker, tenant: str) -> dict[str, Any]:
    return await require_tenant(broker, tenant)


@router.put("/{tenant}", status_code=204, summary="Create a tenant")
async def create_tenant(broker: Broker, tenant: str, info: TenantInfo) -> None:
    check_name("tenant", tenant)

    def create(store: BrokerMetadataStore) -> None:
        if store.get_tenant(tenant) is not None:
            raise conflict("Tenant already exists")
        _check_clusters(store, info)
        store.create_tenant(tenant, info.model_dump())
    await in_store(broker, create)


@router.post("/{tenant}", status_code=204, summary="Update a tenant")
async def update_tenant(broker: Broker, tenant: str, info: TenantInfo) -> None:
    name = check_name("tenant", tenant)

    def update(store: BrokerMetadataStore) -> None:
        tenant_in(store, name)
        _check_clusters(store, info)
        store.update_tenant(name, info.model_dump())
    await in_store(broker, update)


@router.delete("/{tenant}", status_code=204, summary="Delete a tenant (refused while it has namespaces)")
async def delete_tenant(broker: Broker, tenant: str, force: bool = False) -> None:
    name = check_name("tenant", tenant)
    namespaces = await in_store(broker, lambda store: namespaces_in(store, name))
    if namespaces and not force:
        raise conflict("The tenant still has active namespaces")
    for namespace in namespaces:
        await delete_namespace_contents(broker, namespace)
        await in_store(broker, partial(_delete_namespace, namespace=namespace))
    await in_store(broker, lambda store: store.delete_tenant(name))


def _delete_namespace(store: BrokerMetadataStore, namespace: str) -> None:
    store.delete_namespace(namespace)
