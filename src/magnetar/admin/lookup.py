"""``/lookup/v2/topic/...``: which broker serves a topic (Pulsar's ``TopicLookup`` v2).

This broker owns every topic, so the answer is always itself. The official clients use
it (with ``GET .../partitions``) when given an ``http://`` service URL.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header

from magnetar.admin.common import Broker, require_namespace, topic_name

router = APIRouter(tags=["lookup"])


@router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", summary="Look up a topic's broker")
async def lookup_topic(broker: Broker, domain: str, tenant: str, namespace: str, topic: str,
                       authoritative: bool = False, listenerName: str | None = None,
                       x_pulsar_listenername: Annotated[str | None, Header()] = None) -> dict[str, Any]:
    name = topic_name(domain, tenant, namespace, topic)
    await require_namespace(broker, name.namespace_name)
    plain, tls = broker.addresses.lookup_urls(listenerName or x_pulsar_listenername)
    return {"brokerUrl": plain, "brokerUrlTls": tls or "", "httpUrl": broker.addresses.web_url,
            "httpUrlTls": broker.addresses.web_url_tls or "", "nativeUrl": plain}
