"""Admin routes the web console needs and Pulsar has none for (Magnetar only).

- ``GET /admin/v2/topics-page``: every topic of the broker the caller may look up, one
  row per topic with a partitioned topic's partitions folded into it, searched by a
  substring of the name, sorted by name, rate, backlog or storage and cut into pages by
  the server, so a list of 50,000 topics stays quick: a page reads the stats of its own
  rows only. Sorting by a figure sorts a list of up to ``LIVE_SORT_MAX`` rows on the
  figures of now, a longer one on those of the broker's last rate sample (at most
  ``rate_history.RESOLUTION_S`` old), kept ordered between samples (``topic_order``).
- ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{sub}/delayedIndex``:
  the subscription's delayed-delivery index: which tracker, how many messages, its memory,
  the next due time and, for the bucket tracker (PIP-195), each bucket's ledger range,
  message count, segments and the due time of its next segment. A partitioned topic
  answers one entry per partition.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, every_namespace, require_subscription, topic_name, topics_of
from magnetar.admin.rate_history import RateHistory
from magnetar.admin.store_access import in_rules, in_store
from magnetar.admin.topic_figures import Figures, combine, measure
from magnetar.admin.topic_order import KeptOrders, page_steps, run_sliced
from magnetar.core.delayed.bucket_delayed_delivery_tracker import BucketDelayedDeliveryTracker
from magnetar.core.delayed.in_memory_tracker import InMemoryDelayedDeliveryTracker
from magnetar.core.delayed.shared_index import SubscriptionDelayedDeliveryView
from magnetar.core.metadata.interfaces import BrokerMetadataStore
from magnetar.core.security import authorization
from magnetar.core.security.authorization import AccessContext, Operation
from magnetar.core.subscriptions.subscription import Subscription
from magnetar.security.identity import Identity

#: rows whose stats are read per turn of the event loop when sorting few rows by a figure
FILL_SLICE = 250
#: rows of a page read per turn of the event loop (a live topics page is read every second)
PAGE_SLICE = 10
#: a list of up to this many rows sorted by a figure is sorted on the figures of now; a
#: longer one on those of the broker's last rate sample (``topic_order``)
LIVE_SORT_MAX = 1000
#: names listed per turn of the event loop when the topic list is built again
BUILD_SLICE = 5000
#: loaded topics' names looked up per turn of the event loop when looking for those not listed
EXTRA_SLICE = 2000
_PARTITION = re.compile(r"^(.*)-partition-\d+$")

SortKey = Literal["name", "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "backlog",
                  "storageSize", "producers", "subscriptions", "consumers"]


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    partitions: int
    #: whether the broker has any of its topics loaded (figures are zero otherwise)
    loaded: bool
    figures: Figures

    def json(self) -> dict[str, Any]:
        return {"name": self.name, "partitions": self.partitions, "loaded": self.loaded, **self.figures._asdict()}


def _stored_topics(store: BrokerMetadataStore, namespace: str) -> tuple[dict[str, int], list[str]]:
    return store.list_partitioned_topics(namespace), store.list_topics(namespace)


async def _visibility(broker: AdminBroker, identity: Identity | None,
                      namespaces: frozenset[str]) -> dict[str, Callable[[str], bool] | None]:
    """By namespace, a test of topic names (partitioned parents) the caller may look up;
    None when the caller may look up all of them."""
    if broker.authentication is None or not broker.config.authorizationEnabled:
        return dict.fromkeys(namespaces)
    if identity is None:
        return {namespace: _nothing for namespace in namespaces}
    role = identity.role
    contexts = await in_rules(broker, lambda rules: {ns: rules.access.access_context(ns) for ns in namespaces})
    return {namespace: _visible(role, context) for namespace, context in contexts.items()}


def _nothing(name: str) -> bool:
    return False


def _visible(role: str, context: AccessContext) -> Callable[[str], bool] | None:
    if authorization.allowed(role, Operation.LOOKUP, context):
        return None
    return lambda name: authorization.allowed(role, Operation.LOOKUP, context, name)


def _namespace_of(name: str) -> str:
    return name.split("://", 1)[-1].rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of the topic list: a topic, or a partitioned topic with its partitions."""

    name: str
    lowered: str
    namespace: str
    partitions: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Listing:
    """The rows of the topic list, sorted by name, and the namespaces they are of."""

    rows: list[Listed]
    namespaces: frozenset[str]


class TopicDirectory:
    """Every topic name the metadata holds, folded and sorted once and kept until the
    metadata store's topic lists may have changed (``topic_list_changes`` moves: cursor
    and ledger writes, made all the time, leave it), so a page of 50,000 topics does not
    list and parse 50,000 names per request. Topics only the broker has loaded (not yet
    written, or non-persistent) are added, and the list with them kept while they stay the
    same: the same list object stands for the same rows (``topic_order`` keys on it). They
    are looked for again when a topic is loaded or unloaded (``LoadedTopics.changes``
    moves), a look reading every loaded topic's name, ``EXTRA_SLICE`` per turn of the loop."""

    def __init__(self) -> None:
        self._key: int | None = None
        self._listing = Listing([], frozenset())
        self._names: frozenset[str] = frozenset()
        self._with_extra: tuple[frozenset[str], Listing] = (frozenset(), self._listing)
        #: (loads and unloads, topic list changes) when the loaded topics were last compared
        self._checked: tuple[int, int | None] = (-1, None)

    async def listing(self, broker: AdminBroker) -> Listing:
        key = broker.metadata.topic_list_changes
        if key != self._key:
            self._listing, self._names = await self._build(broker)
            self._key = key if broker.metadata.topic_list_changes == key else None
            self._with_extra = (frozenset(), self._listing)
        checked = (broker.topics.changes, self._key)
        if checked != self._checked:
            self._checked = checked
            extra = await self._extra(broker)
            # the names may have been listed again meanwhile, by another request
            extra = frozenset(name for name in extra if name not in self._names)
            if extra != self._with_extra[0]:
                self._with_extra = (extra, self._added(extra))
        return self._with_extra[1]

    async def _extra(self, broker: AdminBroker) -> frozenset[str]:
        """The loaded topics the listing lacks, looked for ``EXTRA_SLICE`` names per turn of the loop."""
        names, known = list(broker.topics), self._names
        extra: set[str] = set()
        for start in range(0, len(names), EXTRA_SLICE):
            if start:
                await asyncio.sleep(0)  # other clients are served between slices
            extra.update(name for name in names[start:start + EXTRA_SLICE] if name not in known)
        return frozenset(extra)

    def _added(self, extra: frozenset[str]) -> Listing:
        if not extra:
            return self._listing
        rows = list(self._listing.rows)
        for name in extra:
            match = _PARTITION.match(name)
            if match is not None and match.group(1) in self._names:
                continue
            rows.append(Listed(name, name.lower(), _namespace_of(name), 0, (name,)))
        rows.sort(key=lambda row: row.name)
        return Listing(rows, self._listing.namespaces | {_namespace_of(name) for name in extra})

    @staticmethod
    async def _build(broker: AdminBroker) -> tuple[Listing, frozenset[str]]:
        rows: list[Listed] = []
        names: set[str] = set()
        namespaces = await in_store(broker, every_namespace)
        for namespace in namespaces:
            partitioned, topics = await in_store(broker, partial(_stored_topics, namespace=namespace))
            for parent, count in partitioned.items():
                members = tuple(f"{parent}-partition-{i}" for i in range(count))
                rows.append(Listed(parent, parent.lower(), namespace, count, members))
                names.add(parent)
                names.update(members)
            for index, name in enumerate(topics):
                names.add(name)
                match = _PARTITION.match(name)
                if match is None or match.group(1) not in partitioned:
                    rows.append(Listed(name, name.lower(), namespace, 0, (name,)))
                if index % BUILD_SLICE == BUILD_SLICE - 1:
                    await asyncio.sleep(0)  # other clients are served between slices
        rows.sort(key=lambda row: row.name)
        return Listing(rows, frozenset(namespaces)), frozenset(names)


async def chosen_rows(broker: AdminBroker, identity: Identity | None, search: str,
                      listed: list[Listed], namespaces: frozenset[str]) -> list[int] | None:
    """The positions of the rows matching ``search`` that the caller may look up; None
    when that is every row. ``namespaces``: those of the rows."""
    needle = search.lower()
    tests = await _visibility(broker, identity, namespaces)
    if not needle and all(test is None for test in tests.values()):
        return None
    chosen = []
    for index, item in enumerate(listed):
        if needle and needle not in item.lowered:
            continue
        visible = tests.get(item.namespace)
        if visible is None or visible(item.name):
            chosen.append(index)
    return chosen


def fill(broker: AdminBroker, item: Listed, now: int) -> TopicRow:
    """The row of ``item`` with its figures now."""
    loaded = [topic for topic in map(broker.topics.get, item.members) if topic is not None]
    if len(loaded) == 1:
        return TopicRow(item.name, item.partitions, True, measure(loaded[0], now).figures)
    figures = combine(measure(topic, now).figures for topic in loaded)
    return TopicRow(item.name, item.partitions, bool(loaded), figures)


async def filled_in_order(broker: AdminBroker, listed: list[Listed], chosen: Sequence[int], sort: str,
                          descending: bool, offset: int, limit: int) -> list[TopicRow]:
    """A page of few rows sorted by a figure: every row filled now, then sorted."""
    now = broker.now_ms()
    rows: list[TopicRow] = []
    for start in range(0, len(chosen), FILL_SLICE):
        rows.extend(fill(broker, listed[i], now) for i in chosen[start:start + FILL_SLICE])
        await asyncio.sleep(0)  # other clients are served between slices
    rows.sort(key=lambda r: (getattr(r.figures, sort), r.name), reverse=descending)
    return rows[offset:offset + limit]


def delayed_index(sub: Subscription) -> dict[str, Any]:
    tracker = sub.delayed_tracker
    if tracker is None:
        return {"tracker": None, "messages": 0, "indexMemoryBytes": 0, "nextDeliveryTime": None, "buckets": []}
    info: dict[str, Any] = {
        "tracker": "in-memory" if isinstance(tracker, InMemoryDelayedDeliveryTracker) else type(tracker).__name__,
        "messages": tracker.number_of_delayed_messages,
        "indexMemoryBytes": tracker.buffer_memory_bytes,
        "nextDeliveryTime": tracker.next_delivery_time_ms(),
        "buckets": [],
    }
    if isinstance(tracker, SubscriptionDelayedDeliveryView):
        info["tracker"] = "shared"
        info["pendingForSubscription"] = tracker.pending
        shared = tracker._index.tracker
        info["sharedTracker"] = "bucket" if isinstance(shared, BucketDelayedDeliveryTracker) else "in-memory"
        if isinstance(shared, BucketDelayedDeliveryTracker):
            info.update(_buckets(shared))
    elif isinstance(tracker, BucketDelayedDeliveryTracker):
        info["tracker"] = "bucket"
        info.update(_buckets(tracker))
    return info


def _buckets(tracker: BucketDelayedDeliveryTracker) -> dict[str, Any]:
    mutable = tracker.last_mutable_bucket
    buckets = []
    for bucket in tracker.immutable_buckets:
        upcoming = bucket.first_schedule_timestamps[bucket.current_segment_entry_id:]
        buckets.append({
            "bucketKey": bucket.bucket_key,
            "bucketId": bucket.bucket_id,
            "startLedgerId": bucket.start_ledger_id,
            "endLedgerId": bucket.end_ledger_id,
            "messages": bucket.number_bucket_delayed_messages,
            "segments": bucket.last_segment_entry_id,
            "loadedSegment": bucket.current_segment_entry_id,
            "nextSegmentDueTime": upcoming[0] if upcoming else None,
            "snapshotSizeBytes": bucket.snapshot_length_bytes,
        })
    return {
        "buckets": buckets,
        "lastMutableBucket": {"startLedgerId": mutable.start_ledger_id, "endLedgerId": mutable.end_ledger_id,
                              "messages": len(mutable), "nextDeliveryTime": mutable.next_delivery_time_ms()},
        "loadedIndexes": tracker.loaded_index_count,
        "snapshotSizeBytes": tracker.snapshot_size_bytes,
    }


@dataclass(frozen=True, slots=True)
class PageQuery:
    """What a page of the topic list asks for."""

    search: str = ""
    sort: str = "name"
    order: str = "asc"
    offset: int = 0
    limit: int = 50


class TopicsPages:
    """The topic list's answers: its names folded and sorted once, its orders by figure kept."""

    def __init__(self, history: RateHistory) -> None:
        self.history = history
        self.directory = TopicDirectory()
        self.orders = KeptOrders()

    async def answer(self, broker: AdminBroker, identity: Identity | None, query: PageQuery) -> dict[str, Any]:
        """What ``GET /admin/v2/topics-page`` answers ``query`` for ``identity``."""
        listing = await self.directory.listing(broker)
        listed = listing.rows
        chosen = await chosen_rows(broker, identity, query.search, listed, listing.namespaces)
        total = len(listed) if chosen is None else len(chosen)
        descending = query.order == "desc"
        offset, limit, sort = query.offset, query.limit, query.sort
        if sort == "name":
            every: Sequence[int] = range(len(listed)) if chosen is None else chosen
            indices = list((every[::-1] if descending else every)[offset:offset + limit])
        elif total <= LIVE_SORT_MAX:
            every = range(len(listed)) if chosen is None else chosen
            page = await filled_in_order(broker, listed, every, sort, descending, offset, limit)
            return {"total": total, "offset": offset, "limit": limit, "topics": [r.json() for r in page]}
        else:
            history = self.history
            kept = await self.orders.order(sort, listed, history.figures, history.generation)
            indices = await run_sliced(page_steps(kept, chosen, offset, limit, descending))
        now = broker.now_ms()
        rows: list[dict[str, Any]] = []
        for start in range(0, len(indices), PAGE_SLICE):
            if start:
                await asyncio.sleep(0)  # other clients are served between slices
            rows.extend(fill(broker, listed[i], now).json() for i in indices[start:start + PAGE_SLICE])
        return {"total": total, "offset": offset, "limit": limit, "topics": rows}


def page_query(search: Annotated[str, Query(max_length=1024)] = "", sort: SortKey = "name",
               order: Literal["asc", "desc"] = "asc", offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
               limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> PageQuery:
    """The query parameters of a page of the topic list, checked."""
    return PageQuery(search, sort, order, offset, limit)


def make_router(pages: TopicsPages) -> APIRouter:
    router = APIRouter(prefix="/admin/v2", tags=["console"])

    @router.get("/topics-page", summary="A page of the broker's topics: searched, sorted, partitions folded")
    async def topics_page(broker: Broker, request: Request,
                          query: Annotated[PageQuery, Depends(page_query)]) -> dict[str, Any]:
        return await pages.answer(broker, request.scope.get("state", {}).get("identity"), query)

    return router


def make_topic_router(domain: Literal["persistent", "non-persistent"]) -> APIRouter:
    router = APIRouter(prefix=f"/admin/v2/{domain}", tags=[f"{domain} delayed delivery"])

    @router.get("/{tenant}/{namespace}/{topic}/subscription/{subName}/delayedIndex",
                summary="The delayed-delivery index of a subscription: tracker, buckets, next due time")
    async def delayed_index_of(broker: Broker, tenant: str, namespace: str, topic: str,
                               subName: str) -> dict[str, Any]:
        partitions = []
        for loaded in await topics_of(broker, topic_name(domain, tenant, namespace, topic)):
            sub = require_subscription(loaded, subName)
            partitions.append({"partitionIndex": loaded.partition_index, **delayed_index(sub)})
        return {"partitions": partitions}

    return router
