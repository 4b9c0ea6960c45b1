"""``/admin/v2/brokers``: health, readiness, runtime configuration, active brokers."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from magnetar.admin.common import PLAIN_TEXT, Broker, check_name
from magnetar.admin.errors import RestError, not_found
from magnetar.core.broker.broker_config import SENSITIVE_KEYS

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


@router.get("/{cluster}", summary="List the active brokers of a cluster")
async def active_brokers(broker: Broker, cluster: str) -> list[str]:
    if broker.metadata.get_cluster(check_name("cluster", cluster)) is None:
        raise not_found("Cluster does not exist")
    if cluster != broker.config.clusterName:
        return []
    if broker.cluster is not None:
        return await broker.cluster.broker_ids()
    return [f"{broker.config.advertisedAddress}:{broker.config.webServicePort or broker.config.webServicePortTls}"]


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
