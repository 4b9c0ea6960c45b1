"""The broker's totals, and their last 15 minutes at a fixed resolution, kept in memory.

Every ``RESOLUTION_S`` seconds a sample sums what the broker's loaded topics have counted
since the previous one: messages and bytes in (producers) and out (consumers), and the
gauges topics, producers, subscriptions, consumers, backlog and storage. The last
``SAMPLES`` are kept (15 minutes), whether or not anyone looks. Two routes read them:

- ``GET /admin/v2/broker-stats/load-report``: the latest totals, with the field names of
  Pulsar's ``LocalBrokerData`` (``msgRateIn``, ``numTopics``, ...) and Magnetar's
  additions ``storageSize``, ``msgBacklog`` and ``numSubscriptions``;
- ``GET /admin/v2/broker-stats/rate-history``: the samples, oldest first (Magnetar only).

Counters that go down between two samples (a consumer closed, a topic unloaded) count as
zero for that sample rather than as a negative rate.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, astuple, dataclass
from typing import Any

from fastapi import APIRouter, Response

from magnetar import __version__
from magnetar.admin.admin_broker import AdminBroker
from magnetar.admin.common import Broker, every_namespace
from magnetar.admin.scrape_pacing import ScrapePacer
from magnetar.admin.store_access import in_store
from magnetar.admin.topic_figures import Figures, measure
from magnetar.core.broker.broker_timers import PeriodicTask
from magnetar.core.topics.topic import Topic

log = logging.getLogger(__name__)

RESOLUTION_S = 5
SAMPLES = 15 * 60 // RESOLUTION_S
#: loaded topics read between two looks at whether the walk's slice is over
SLICE = 10
#: what the rate-history route answers, for the OpenAPI document
HISTORY_RESPONSE: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {"schema": {
    "type": "object", "properties": {"resolutionSeconds": {"type": "number"},
                                     "samples": {"type": "array", "items": {"type": "object"}}}}}}}}


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters (ever increasing while the same clients stay) and gauges of the loaded topics."""

    msgs_in: int = 0
    bytes_in: int = 0
    msgs_out: int = 0
    bytes_out: int = 0
    topics: int = 0
    producers: int = 0
    subscriptions: int = 0
    consumers: int = 0
    backlog: int = 0
    storage: int = 0


@dataclass(frozen=True, slots=True)
class Sample:
    timestamp: int
    msgRateIn: float
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float
    numTopics: int
    numProducers: int
    numSubscriptions: int
    numConsumers: int
    msgBacklog: int
    storageSize: int


class Tally:
    """Totals added up one topic at a time, so that a walk can stop between any two."""

    __slots__ = ("msgs_in", "bytes_in", "msgs_out", "bytes_out", "count", "producers", "subscriptions",
                 "consumers", "backlog", "storage")

    def __init__(self) -> None:
        self.msgs_in = self.bytes_in = self.msgs_out = self.bytes_out = self.count = 0
        self.producers = self.subscriptions = self.consumers = self.backlog = self.storage = 0

    def add(self, topic: Topic, now_ms: int) -> Figures:
        """Count ``topic`` in; its figures."""
        measured = measure(topic, now_ms)
        mine = measured.figures
        self.count += 1
        self.msgs_in += topic.msg_in.total_msgs
        self.bytes_in += topic.msg_in.total_bytes
        self.msgs_out += measured.msgs_out
        self.bytes_out += measured.bytes_out
        self.producers += mine.producers
        self.storage += mine.storageSize
        self.subscriptions += mine.subscriptions
        self.backlog += mine.backlog
        self.consumers += mine.consumers
        return mine

    def totals(self) -> Totals:
        return Totals(self.msgs_in, self.bytes_in, self.msgs_out, self.bytes_out, self.count, self.producers,
                      self.subscriptions, self.consumers, self.backlog, self.storage)


def totals(named: Iterable[tuple[str, Topic]], now_ms: int, figures: dict[str, Figures] | None = None) -> Totals:
    """The totals of ``named`` topics; each topic's figures go into ``figures`` if given."""
    tally = Tally()
    for name, topic in named:
        mine = tally.add(topic, now_ms)
        if figures is not None:
            figures[name] = mine
    return tally.totals()


def add(a: Totals, b: Totals) -> Totals:
    return Totals(*(x + y for x, y in zip(astuple(a), astuple(b), strict=True)))


def sample_between(before: Totals, after: Totals, seconds: float, timestamp: int) -> Sample:
    def rate(old: int, new: int) -> float:
        return max(0, new - old) / seconds if seconds > 0 else 0.0
    return Sample(timestamp, rate(before.msgs_in, after.msgs_in), rate(before.msgs_out, after.msgs_out),
                  rate(before.bytes_in, after.bytes_in), rate(before.bytes_out, after.bytes_out),
                  after.topics, after.producers, after.subscriptions, after.consumers, after.backlog, after.storage)


class RateHistory:
    """The samples; ``start`` takes one every ``resolution_s`` on the running event loop.
    A sample's walk over the loaded topics runs in slices while the loop has no client
    work in hand (``scrape_pacing``, as a scrape's reads): in back-to-back slices of 100
    topics, a walk over 20,000 held every publish 20 to 240 ms, each five seconds, as the
    syncing thread's reports waited for the loop and its interpreter lock. Each walk also
    keeps every loaded topic's figures (``figures``, replaced whole when a walk ends and
    ``generation`` counts up), which the topic list sorts by."""

    def __init__(self, broker: AdminBroker, resolution_s: float = RESOLUTION_S, size: int = SAMPLES) -> None:
        self.broker = broker
        self.resolution_s = resolution_s
        self.samples: deque[Sample] = deque(maxlen=size)
        self.figures: dict[str, Figures] = {}
        self.generation = 0
        self._last: tuple[int, Totals] | None = None
        self._task: PeriodicTask | None = None
        self._walk_task: asyncio.Task[None] | None = None
        #: each sample of ``samples`` as JSON, encoded when it was taken
        self._each: deque[bytes] = deque(maxlen=size)
        self._encoded: tuple[Sample | None, bytes] = (None, b"")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Samples are taken on the broker's one timer; a walk's slices take turns of ``loop``."""
        self._walk_on(loop, first=True)
        self._task = PeriodicTask(self.broker.timers, max(1, round(self.resolution_s * 1000)),
                                  lambda now: self._tick(loop))
        self._task.start(self.broker.now_ms())

    def stop(self) -> None:
        if self._task is not None:
            self.broker.timers.cancel(self._task)
            self._task = None
        if self._walk_task is not None:
            self._walk_task.cancel()
            self._walk_task = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._walk_task is None:  # the previous walk is still going: this sample is skipped
            self._walk_on(loop, first=False)

    def _walk_on(self, loop: asyncio.AbstractEventLoop, first: bool) -> None:
        self._walk_task = loop.create_task(self._walk(first))
        self._walk_task.add_done_callback(self._walked)

    def _walked(self, task: asyncio.Task[None]) -> None:
        if self._walk_task is task:
            self._walk_task = None
        if not task.cancelled() and task.exception() is not None:
            log.error("a rate sample's walk failed", exc_info=task.exception())

    async def _walk(self, first: bool) -> None:
        live = self.broker.topics
        names = list(live)  # the names alone: a list of (name, topic) pairs at 50,000 is 2 ms more
        figures: dict[str, Figures] = {}
        tally = Tally()
        pacer = ScrapePacer(self.broker.activity)
        now = self.broker.now_ms()
        for count, name in enumerate(names):
            topic = live.get(name)
            if topic is not None:  # else unloaded or deleted since the walk began
                figures[name] = tally.add(topic, now)
            if count % SLICE == SLICE - 1 and pacer.due():
                await pacer.rest()
                now = self.broker.now_ms()
        self.figures = figures
        self.generation += 1
        if first:
            self._last = (self.broker.now_ms(), tally.totals())
        else:
            self.record(self.broker.now_ms(), tally.totals())

    def record(self, now: int, current: Totals) -> Sample:
        then, before = self._last if self._last is not None else (now, current)
        sample = sample_between(before, current, (now - then) / 1000, now)
        self.samples.append(sample)
        self._each.append(json.dumps(asdict(sample)).encode())
        self._last = (now, current)
        return sample

    def latest(self) -> Sample:
        """The last sample, or one taken now (rates zero) before the first."""
        if self.samples:
            return self.samples[-1]
        now = self.broker.now_ms()
        current = totals(self.broker.topics.items(), now)
        return sample_between(current, current, 0, now)

    def encoded(self) -> bytes:
        """The samples as the rate-history route answers them, JSON: each sample encoded
        once, when taken, and the answer joined once per sample."""
        last = self.samples[-1] if self.samples else None
        kept, body = self._encoded
        if kept is not last or not body:
            body = b'{"resolutionSeconds": %s, "samples": [%s]}' % (json.dumps(self.resolution_s).encode(),
                                                                     b", ".join(self._each))
            self._encoded = (last, body)
        return body


async def load_report(broker: AdminBroker, history: RateHistory) -> dict[str, Any]:
    """What the load-report route answers: the latest sample, with the broker's URLs."""
    latest = history.latest()
    config = broker.config
    web_port = config.webServicePort or config.webServicePortTls
    namespaces = len(await in_store(broker, every_namespace))
    return {
        "webServiceUrl": f"http://{config.advertisedAddress}:{web_port}",
        "pulsarServiceUrl": f"pulsar://{config.advertisedAddress}:{config.brokerServicePort}",
        "brokerVersionString": __version__,
        "clusterName": config.clusterName,
        "numNamespaces": namespaces,
        "numBundles": namespaces,
        "lastUpdate": latest.timestamp,
        **asdict(latest),
        **_load_manager_fields(broker),
    }


#: what a cluster's broker adds from its load manager's report (Pulsar's LocalBrokerData)
LOAD_MANAGER_FIELDS = ("cpu", "bandwidthIn", "bandwidthOut", "bundles", "lastStats", "numBundles")


def _load_manager_fields(broker: AdminBroker) -> dict[str, Any]:
    balancing = None if broker.cluster is None else broker.cluster.load_balancing
    if balancing is None:
        return {}
    report = balancing.load_report()
    return {key: report[key] for key in LOAD_MANAGER_FIELDS if key in report}


def make_router(history: RateHistory) -> APIRouter:
    router = APIRouter(prefix="/admin/v2/broker-stats", tags=["broker-stats"])

    @router.get("/load-report", summary="The broker's load: rates and counts of its topics and clients")
    async def load_report_of(broker: Broker) -> dict[str, Any]:
        return await load_report(broker, history)

    @router.get("/rate-history", response_class=Response, responses=HISTORY_RESPONSE,
                summary="The broker's rates and counts over the last 15 minutes")
    async def rate_history() -> Response:
        return Response(history.encoded(), media_type="application/json")

    return router
