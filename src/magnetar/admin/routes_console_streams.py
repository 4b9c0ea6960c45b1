"""The web console's live pages as server-sent events (Magnetar only; ``console_feeds``).

- ``GET /admin/v2/console-stream/overview``: ``load-report`` events (what
  ``/admin/v2/broker-stats/load-report`` answers) and ``rate-history`` events (what
  ``/admin/v2/broker-stats/rate-history`` answers, sent again only when a sample was added);
- ``GET /admin/v2/console-stream/topics-page``, with the query of ``/admin/v2/topics-page``:
  ``topics-page`` events, that route's answer;
- ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/console-stream``: ``topic``
  events, ``{"partitions": ..., "stats": ...}``: what ``.../partitions`` answers and what
  ``.../stats`` answers, or ``.../partitioned-stats?perPartition=true`` for a partitioned
  topic.

Each route's permission is that of the routes whose answers it carries (``access.RULES``).
An event is sent when its answer changed, at most once a ``console_feeds.PUSH_INTERVAL_S``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, topic_name
from magnetar.admin.console_feeds import Feeds, encoded, event
from magnetar.admin.rate_history import RateHistory, load_report
from magnetar.admin.routes_console import PageQuery, TopicsPages, page_query
from magnetar.admin.routes_topics import partitioned_metadata, partitioned_stats, topic_stats
from magnetar.admin.stats import StatsOptions
from magnetar.core.names import TopicName
from magnetar.security.identity import Identity

#: what a stream's answer is, for the OpenAPI document
EVENT_STREAM: dict[int | str, dict[str, object]] = {200: {"content": {"text/event-stream": {"schema": {
    "type": "string"}}}}}
DEFAULT_STATS = StatsOptions()


async def topic_answer(broker: AdminBroker, name: TopicName) -> dict[str, object]:
    """What the console's topic page shows: the topic's partitions and its stats."""
    partitions = await partitioned_metadata(broker, name)
    if partitions["partitions"] > 0:
        return {"partitions": partitions, "stats": await partitioned_stats(broker, name, DEFAULT_STATS, True)}
    return {"partitions": partitions, "stats": await topic_stats(broker, name, DEFAULT_STATS)}


def make_router(history: RateHistory, pages: TopicsPages, feeds: Feeds) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/console-stream", tags=["console"])

    @router.get("/overview", response_class=StreamingResponse, responses=EVENT_STREAM,
                summary="The broker's load report and rate history as they change (server-sent events)")
    async def overview(broker: Broker) -> StreamingResponse:
        async def report() -> bytes:
            return event("load-report", encoded(await load_report(broker, history)))

        async def samples() -> bytes:
            return event("rate-history", history.encoded())
        return feeds.stream([await feeds.feed(("load-report",), report),
                             await feeds.feed(("rate-history",), samples)])

    @router.get("/topics-page", response_class=StreamingResponse, responses=EVENT_STREAM,
                summary="A page of the broker's topics as it changes (server-sent events)")
    async def topics_page(broker: Broker, request: Request,
                          query: Annotated[PageQuery, Depends(page_query)]) -> StreamingResponse:
        identity: Identity | None = request.scope.get("state", {}).get("identity")

        async def page() -> bytes:
            return event("topics-page", encoded(await pages.answer(broker, identity, query)))
        role = None if identity is None else identity.role
        return feeds.stream([await feeds.feed(("topics-page", role, query), page)])

    return router


def make_topic_router(domain: Literal["persistent", "non-persistent"], feeds: Feeds) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=["console"])

    @router.get("/{tenant}/{namespace}/{topic}/console-stream", response_class=StreamingResponse,
                responses=EVENT_STREAM, summary="A topic's partitions and stats as they change (server-sent events)")
    async def topic_stream(broker: Broker, tenant: str, namespace: str, topic: str) -> StreamingResponse:
        name = topic_name(domain, tenant, namespace, topic)

        async def answer() -> bytes:
            return event("topic", encoded(await topic_answer(broker, name)))
        return feeds.stream([await feeds.feed(("topic", str(name)), answer)])

    return router
