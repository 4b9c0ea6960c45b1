"""``/admin/v2/tenants``: list, get, create (PUT), update (POST), delete (Pulsar's ``Tenants``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from magnetar.admin.common import Broker, check_name, require_tenant
from magnetar.admin.errors import conflict, precondition_failed
from magnetar.admin.namespace_ops import delete_namespace_contents

router = APIRouter(prefix="/admin/v2/tenants", tags=["tenants"])


class TenantInfo(BaseModel):
    """Pulsar's ``TenantInfo``."""

    model_config = ConfigDict(extra="forbid")
    adminRoles: list[str] = []
    allowedClusters: list[str] = []


def _check_clusters(broker: Broker, info: TenantInfo) -> None:
    missing = [c for c in info.allowedClusters if broker.metadata.get_cluster(c) is None]
    if missing:
        raise precondition_failed(f"Clusters do not exist: {', '.join(sorted(missing))}")


@router.get("", summary="List tenants")
async def list_tenants(broker: Broker) -> list[str]:
    return broker.metadata.list_tenants()


@router.get("/{tenant}", summary="Get a tenant's admin roles and allowed clusters")
async def get_tenant(broker: Broker, tenant: str) -> dict[str, Any]:
    return require_tenant(broker, tenant)


@router.put("/{tenant}", status_code=204, summary="Create a tenant")
async def create_tenant(broker: Broker, tenant: str, info: TenantInfo) -> None:
    check_name("tenant", tenant)
    if broker.metadata.get_tenant(tenant) is not None:
        raise conflict("Tenant already exists")
    _check_clusters(broker, info)
    broker.metadata.create_tenant(tenant, info.model_dump())


@router.post("/{tenant}", status_code=204, summary="Update a tenant")
async def update_tenant(broker: Broker, tenant: str, info: TenantInfo) -> None:
    require_tenant(broker, tenant)
    _check_clusters(broker, info)
    broker.metadata.update_tenant(tenant, info.model_dump())


@router.delete("/{tenant}", status_code=204, summary="Delete a tenant (refused while it has namespaces)")
async def delete_tenant(broker: Broker, tenant: str, force: bool = False) -> None:
    require_tenant(broker, tenant)
    namespaces = broker.metadata.list_namespaces(tenant)
    if namespaces and not force:
        raise conflict("The tenant still has active namespaces")
    for namespace in namespaces:
        await delete_namespace_contents(broker, namespace)
        broker.metadata.delete_namespace(namespace)
    broker.metadata.delete_tenant(tenant)
