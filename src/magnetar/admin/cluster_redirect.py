"""Admin requests on a topic another broker of the cluster serves: 307 to its web service.

Pulsar's brokers validate topic ownership on every topic operation of the admin API and
on ``/lookup/v2/topic/...``, and redirect to the owner with ``307 Temporary Redirect``
(the same path and query, on the owner's web URL); ``pulsar-admin``, the Python admin and
the clients' HTTP lookup follow it. A bundle nobody owns is acquired by the broker the
placement picks, as on a binary lookup. Operations on a topic's partitioned metadata
(``.../partitions``) and namespace-wide ones are served by any broker.
"""

from __future__ import annotations

import re

from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.core.broker.broker_facade import TopicOwners
from magnetar.core.cluster.topic_lookup import AdminRedirect, NotReady
from magnetar.core.names import TopicName

#: a topic's admin path, or its lookup, with the topic's name in groups
_TOPIC_PATH = re.compile(r"^/(?:admin/v2|lookup/v2/topic)/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)(/.*)?$")
#: operations on the partitioned topic's metadata, which live in the store every broker reads
_ANY_BROKER = re.compile(r"^/(partitions|partitioned-stats|partitioned-internalStats)$")


def topic_of_path(path: str) -> TopicName | None:
    """The topic an admin or lookup path names, when it is served by the topic's owner."""
    found = _TOPIC_PATH.match(path)
    if found is None:
        return None
    domain, tenant, namespace, topic, rest = found.groups()
    if rest and _ANY_BROKER.match(rest):
        return None
    try:
        return TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
    except ValueError:
        return None  # the route itself answers a bad name


class ClusterRedirect:
    """ASGI middleware: ``owners()`` is the broker's :class:`TopicOwners` (None: standalone)."""

    def __init__(self, app: ASGIApp, owners: TopicOwners) -> None:
        self.app = app
        self.owners = owners

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = topic_of_path(scope["path"]) if scope["type"] == "http" else None
        if name is None:
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        path = scope["path"] + (f"?{query}" if query else "")
        answer = await self.owners.admin_answer(name, path)
        if isinstance(answer, AdminRedirect):
            await RedirectResponse(answer.location, status_code=answer.status)(scope, receive, send)
        elif isinstance(answer, NotReady):
            await JSONResponse({"reason": answer.message}, status_code=503)(scope, receive, send)
        else:
            await self.app(scope, receive, send)
