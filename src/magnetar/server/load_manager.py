"""The load manager of a cluster's broker: its load reports, the leader election, and, on the
leader, placement of free bundles, shedding and bundle splits.

The decisions are core's (:mod:`magnetar.core.cluster.load_report`, ``leader_election``,
``least_resource_usage``, ``threshold_shedder``, ``bundle_split``); this module runs them.
Store calls run on the membership's thread pool. Every broker:

- publishes its load report every ``loadBalancerReportUpdateMinIntervalMillis`` into its
  registration ``/loadbalance/brokers/<broker>`` (Pulsar's ``LocalBrokerData``);
- tries to become the leader (``/loadbalance/leader``) whenever it sees none.

The leader alone places free bundles (the others send such lookups to it), and every
``loadBalancerSheddingIntervalMinutes`` runs the shedder, every
``loadBalancerSplitIntervalMinutes`` the split check; each decision is logged with its
reason, and carried out (unless shedding is disabled: then the log line is all) by the
bundle's owner, through its admin API when it is another broker, with this broker's own
credentials (``brokerClientAuthenticationPlugin``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

from magnetar.core.cluster.bundle_data import BundleData
from magnetar.core.cluster.bundle_split import find_bundles_to_split
from magnetar.core.cluster.bundles_data import bundles_of
from magnetar.core.cluster.leader_election import (
    AskLeader,
    Election,
    InvalidLeaderData,
    LeaderBroker,
    NoLeader,
    PlaceHere,
    election_state,
    route_free_bundle,
)
from magnetar.core.cluster.least_resource_usage import BrokerLoad, select_least_loaded
from magnetar.core.cluster.load_balancer_config import LoadBalancerConfig
from magnetar.core.cluster.load_report import BrokerLoadReport, BundleStats, InvalidLoadReport
from magnetar.core.cluster.namespace_bundles import InvalidBundle, NamespaceBundle
from magnetar.core.cluster.topic_lookup import AdminRedirect, NotReady, Placed
from magnetar.core.metadata.records import MetadataError, SessionState
from magnetar.security.broker_client import BrokerClientCredentials
from magnetar.server.bundle_splits import split_owned_bundle
from magnetar.server.clock import now_ms
from magnetar.server.cluster_membership import ClusterMembership
from magnetar.server.load_reporter import BundleTotals, CpuMeter, build_report

log = logging.getLogger("magnetar.loadbalance")
#: topics summed into a load report per turn of the event loop
REPORT_SLICE = 250
#: how long a transfer's destination waits for the bundle's next lookup (and a shed bundle
#: keeps away from the broker it was shed from)
TRANSFER_VALID_MS = 60_000
#: how long lookups of a free bundle placed a moment ago go where the first one went
PLACEMENT_KEPT_MS = 5_000
#: redirects followed by a call to another broker's admin API
MAX_REDIRECTS = 3


class TopicList(Protocol):
    def list_topics(self, namespace: str) -> list[str]: ...


@dataclass
class LoadBalancingCounters:
    """Pulsar's ``pulsar_lb_unload_*`` and ``pulsar_lb_bundles_split_total`` counts, on the leader."""

    unload_broker_total: int = 0
    unload_bundle_total: int = 0
    bundles_split_total: int = 0


class LoadManager:
    def __init__(self, membership: ClusterMembership, config: LoadBalancerConfig, topics: TopicList,
                 credentials: BrokerClientCredentials | None = None) -> None:
        self.membership = membership
        #: what this broker presents to the others' admin API (brokerClientAuthentication*)
        self.credentials = credentials
        self.config = config
        self.topics = topics
        self.leading = False
        self.leader: LeaderBroker | None = None
        #: one election round at a time (the periodic one, and lookups that find the leader gone)
        self._electing = asyncio.Lock()
        self.shedder = config.make_shedder()
        #: bundles a transfer sent somewhere: bundle -> (destination, when), placed there on their next lookup
        self._destinations: dict[str, tuple[str, int]] = {}
        #: bundles the leader placed lately: bundle -> (broker, when); a lookup again goes the same way
        self._recently_placed: dict[str, tuple[str, int]] = {}
        #: bundles shed lately: bundle -> the broker it was shed from, where it does not go back
        self._shed_from: dict[str, tuple[str, int]] = {}
        self.report = BrokerLoadReport()
        self.counters = LoadBalancingCounters()
        self._cpu = CpuMeter()
        #: bundles the leader placed on each broker since that broker's last report (at that report's time)
        self._placed: dict[str, tuple[int, list[NamespaceBundle]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: the leader's history of each bundle (Pulsar's BundleData), written to the store now and then
        self.bundle_data: dict[str, BundleData] = {}

    @property
    def me(self) -> str:
        return self.membership.broker_id

    # -- start and stop ------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def changed(state: SessionState) -> None:
            loop.call_soon_threadsafe(self._session_changed, state)
        self.membership.store.add_session_listener(changed)
        await self.publish_report()
        await self.elect()
        report_s = self.config.loadBalancerReportUpdateMinIntervalMillis / 1000
        self._tasks = [asyncio.ensure_future(self._every(report_s, self._report_and_elect))]
        if self.config.loadBalancerEnabled:
            self._tasks += [
                asyncio.ensure_future(self._every(self.config.loadBalancerSheddingIntervalMinutes * 60, self.shed)),
                asyncio.ensure_future(self._every(self.config.loadBalancerSplitIntervalMinutes * 60, self.split)),
                asyncio.ensure_future(self._every(self.config.loadBalancerResourceQuotaUpdateIntervalMinutes * 60,
                                                  self.write_bundle_data)),
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def _session_changed(self, state: SessionState) -> None:
        if state is SessionState.LOST and self.leading:
            log.warning("metadata store session lost: no longer the load manager's leader")
            self.leading = False

    @staticmethod
    async def _every(seconds: float, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await action()
            except Exception:  # one failed cycle must not end the next ones
                log.exception("load manager cycle failed")

    async def _report_and_elect(self) -> None:
        await self.publish_report()
        await self.elect()

    # -- reports ---------------------------------------------------------------------------
    async def publish_report(self) -> None:
        """Measure this broker's load and write it into its registration."""
        now = now_ms()
        owned = [NamespaceBundle.parse(ns, bundle_range) for ns, bundle_range in self.membership.owned]
        totals = BundleTotals(owned)
        topics = list(self.membership.shell.topics.values())
        for start in range(0, len(topics), REPORT_SLICE):
            totals.add(topics[start:start + REPORT_SLICE], now)
            await asyncio.sleep(0)  # the loop serves between two slices
        self.report = build_report(totals.stats(), self._cpu.usage(), self.config.nic_speed_kbytes, now)
        self.membership.load_fields = self.report.to_json()
        await self.membership.update_registration()

    def _read_reports(self) -> dict[str, tuple[BrokerLoadReport, int]]:
        """On the pool: each registered broker's report and its number of owned bundles."""
        found: dict[str, tuple[BrokerLoadReport, int]] = {}
        store = self.membership.store
        for broker_id in store.list_brokers():
            data = store.get_broker(broker_id)
            if data is None:
                continue
            try:
                found[broker_id] = (BrokerLoadReport.from_json(data), int(data.get("numBundles") or 0))
            except (InvalidLoadReport, TypeError, ValueError) as exc:
                log.warning("load report of %s: %s", broker_id, exc)
        return found

    async def reports(self) -> dict[str, BrokerLoadReport]:
        return {b: r for b, (r, _) in (await self.membership.calls.run(self._read_reports)).items()}

    # -- leader ----------------------------------------------------------------------------
    async def elect(self) -> None:
        async with self._electing:
            await self._elect()

    async def _elect(self) -> None:
        store = self.membership.store
        try:
            self.leader = _leader(await self.membership.calls.run(store.get_leader))
            if election_state(self.me, self.leader, self.leading) is Election.TRY_TO_LEAD:
                me = LeaderBroker(self.me, self.membership.me.http_url)
                if await self.membership.calls.run(store.elect_leader, me.to_json()):
                    self.leading, self.leader = True, me
                    log.info("%s is the load manager's leader", self.me)
                else:
                    self.leader = _leader(await self.membership.calls.run(store.get_leader))
        except MetadataError as exc:
            log.warning("leader election: %s", exc)
        if self.leading and (self.leader is None or self.leader.broker_id != self.me):
            log.warning("the leader node is gone or another's: no longer the load manager's leader")
            self.leading = False

    # -- placement ---------------------------------------------------------------------------
    async def place(self, bundle: NamespaceBundle, authoritative: bool) -> Placed | NotReady:
        """Where a free bundle goes, for a lookup (or admin request) that reached this broker."""
        route = route_free_bundle(self.me, None if self.leader is None else self.leader.broker_id, self.leading,
                                  authoritative)
        if isinstance(route, AskLeader):
            # the leader seen at the last election round may be gone since (its node went with
            # its session): read the node again rather than send the client to a dead broker
            await self.elect()
            route = route_free_bundle(self.me, None if self.leader is None else self.leader.broker_id, self.leading,
                                      authoritative)
        if isinstance(route, AskLeader):
            return Placed(route.leader, authoritative=False)
        if isinstance(route, NoLeader):
            return NotReady(route.message)
        if not isinstance(route, PlaceHere):
            return Placed(self.me)
        reports = await self.membership.calls.run(self._read_reports)
        now = now_ms()
        destination, at = self._destinations.pop(str(bundle), (None, 0))
        if destination in reports and now - at < TRANSFER_VALID_MS:
            log.info("placing bundle %s on %s: the shedder's transfer", bundle, destination)
            self._recently_placed[str(bundle)] = (destination, now)
            return Placed(destination)
        earlier, at = self._recently_placed.get(str(bundle), (None, 0))
        if earlier in reports and now - at < PLACEMENT_KEPT_MS:
            return Placed(earlier)  # the same client, or another of the bundle's, looking up again
        source, at = self._shed_from.get(str(bundle), (None, 0))
        if source in reports and len(reports) > 1 and now - at < TRANSFER_VALID_MS:
            reports = {b: r for b, r in reports.items() if b != source}
        loads = {}
        for broker, (report, owned) in reports.items():
            since, placed = self._placed.get(broker, (0, []))
            pending = placed if report.last_update <= since else []
            in_namespace = sum(1 for b in report.bundles if b.rpartition("/")[0] == bundle.namespace)
            in_namespace += sum(1 for b in pending if b.namespace == bundle.namespace)
            usage = report.max_resource_usage_with_weight(self.config.weights)
            loads[broker] = BrokerLoad(usage, max(owned, len(report.bundles)) + len(pending), in_namespace)
        chosen = select_least_loaded(loads, self.config.placement)
        if chosen is None:
            return NotReady("no broker is registered in the cluster")
        since, placed = self._placed.get(chosen, (0, []))
        last = reports[chosen][0].last_update
        self._placed[chosen] = (last, [*placed, bundle] if since == last else [bundle])
        self._recently_placed = {b: (broker, at) for b, (broker, at) in self._recently_placed.items()
                                 if now - at < PLACEMENT_KEPT_MS}
        self._recently_placed[str(bundle)] = (chosen, now)
        log.info("placing bundle %s on %s: load %.1f%%, %d bundles, %d of its namespace (least loaded of %d "
                 "brokers)", bundle, chosen, loads[chosen].usage * 100, loads[chosen].bundles,
                 loads[chosen].namespace_bundles, len(loads))
        return Placed(chosen)

    # -- shedding ----------------------------------------------------------------------------
    async def shed(self) -> None:
        """One shedding cycle, on the leader."""
        if not self.leading:
            return
        reports = await self.reports()
        for report in reports.values():
            for bundle, stats in report.bundles.items():
                self.bundle_data[bundle] = self.bundle_data.get(bundle, BundleData()).update(stats)
        result = self.shedder.find_bundles_for_unloading(reports, now_ms())
        for skipped in result.skipped:
            log.info("load shedding: %s not shed: %s", skipped.broker, skipped.reason)
        dry = "" if self.config.loadBalancerSheddingEnabled else " (dry run: loadBalancerSheddingEnabled=false)"
        for decision in result.unloads:
            to = "" if decision.destination is None else f" to {decision.destination}"
            log.info("load shedding: unload %s from %s%s: %s%s", decision.bundle, decision.broker, to,
                     decision.reason, dry)
        if dry or not result.unloads:
            return
        self.counters.unload_broker_total += len({d.broker for d in result.unloads})
        now = now_ms()
        self._shed_from = {b: (broker, at) for b, (broker, at) in self._shed_from.items()
                           if now - at < TRANSFER_VALID_MS}
        for decision in result.unloads:
            self._shed_from[decision.bundle] = (decision.broker, now)
            self._recently_placed.pop(decision.bundle, None)
            if decision.destination is not None:
                self._destinations[decision.bundle] = (decision.destination, now_ms())
            query = "" if decision.destination is None else f"?destinationBroker={quote(decision.destination)}"
            if await self._at_owner(decision.broker, decision.bundle, "unload", query):
                self.counters.unload_bundle_total += 1

    async def write_bundle_data(self) -> None:
        """The leader's bundle histories into ``/loadbalance/bundle-data`` (Pulsar's layout)."""
        if not self.leading:
            return
        written = dict(self.bundle_data)

        def write() -> None:
            for bundle, data in written.items():
                self.membership.store.put_bundle_data(bundle, data.to_json())
        await self.membership.calls.run(write)
        log.info("wrote the bundle data of %d bundles", len(written))

    # -- splits ------------------------------------------------------------------------------
    async def split(self) -> None:
        """One split check, on the leader."""
        if not (self.leading and self.config.loadBalancerAutoBundleSplitEnabled):
            return
        reports = await self.reports()
        stats: dict[str, BundleStats] = {}
        owners: dict[str, str] = {}
        for broker, report in reports.items():
            for bundle, bundle_stats_ in report.bundles.items():
                stats[bundle], owners[bundle] = bundle_stats_, broker
        counts = await self.membership.calls.run(self._bundle_counts, {b.rsplit("/", 1)[0] for b in stats})
        unload = "true" if self.config.loadBalancerAutoUnloadSplitBundlesEnabled else "false"
        for decision in find_bundles_to_split(stats, counts, self.config.split):
            log.info("bundle split: split %s on %s: %s", decision.bundle, owners[decision.bundle], decision.reason)
            if await self._at_owner(owners[decision.bundle], decision.bundle, "split", f"?unload={unload}"):
                self.counters.bundles_split_total += 1

    def _bundle_counts(self, namespaces: set[str]) -> dict[str, int]:
        counts = {}
        for namespace in namespaces:
            try:
                counts[namespace] = len(bundles_of(namespace, self.membership.store.get_namespace_policies(namespace)))
            except (MetadataError, InvalidBundle) as exc:
                log.warning("bundles of %s: %s", namespace, exc)
        return counts

    async def _at_owner(self, owner: str, bundle_name: str, action: str, query: str) -> bool:
        """``action`` (unload, split) on a bundle at its owner: here directly, elsewhere through its admin API."""
        namespace, _, bundle_range = bundle_name.rpartition("/")
        path = f"/admin/v2/namespaces/{namespace}/{bundle_range}/{action}"
        try:
            bundle = NamespaceBundle.parse(namespace, bundle_range)
            if owner == self.me:
                if action == "unload":
                    destination = query.partition("destinationBroker=")[2] or None
                    await self.membership.unload_bundle(bundle, path, unquote(destination) if destination else None)
                else:
                    await self.split_bundle(bundle, self.config.defaultNamespaceBundleSplitAlgorithm,
                                            query.endswith("true"), path)
                return True
            base = await self.membership.web_url_of(owner)
            if base is None:
                log.warning("%s of %s: its owner %s is no longer registered", action, bundle_name, owner)
                return False
            headers = {} if self.credentials is None else await asyncio.to_thread(self.credentials.headers)
            await put_at_broker(base.rstrip("/") + path + query, headers)
            return True
        except Exception as exc:  # the next cycle decides again from fresh reports
            log.warning("%s of %s at %s failed: %s", action, bundle_name, owner, exc)
            return False

    # -- admin -------------------------------------------------------------------------------
    def decision_counts(self) -> dict[str, int]:
        counters = self.counters
        return {"unload_broker": counters.unload_broker_total, "unload_bundle": counters.unload_bundle_total,
                "bundles_split": counters.bundles_split_total}

    def leader_broker(self) -> dict[str, Any] | None:
        return None if self.leader is None else self.leader.to_json()

    async def split_bundle(self, bundle: NamespaceBundle, algorithm: str, unload: bool, path: str) \
            -> AdminRedirect | None:
        topics = await self.membership.calls.run(self.topics.list_topics, bundle.namespace)
        return await split_owned_bundle(self.membership, bundle, algorithm, unload, topics, path)

    def load_report(self) -> dict[str, Any]:
        """This broker's latest report, as ``GET /admin/v2/broker-stats/load-report`` answers."""
        return {**self.membership.registration(), **self.report.to_json()}


def _leader(data: Any) -> LeaderBroker | None:
    if data is None:
        return None
    try:
        return LeaderBroker.from_json(data)
    except InvalidLeaderData as exc:
        log.warning("leader node: %s", exc)
        return None


async def put_at_broker(url: str, headers: dict[str, str]) -> None:
    """A PUT to another broker's admin API; a 307 is followed with the same credentials
    (httpx drops them on a redirect to another origin, which every other broker is)."""
    import httpx
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(MAX_REDIRECTS + 1):
            response = await client.put(url, headers=headers)
            if response.status_code != 307 or "location" not in response.headers:
                break
            url = str(response.url.join(response.headers["location"]))
    if response.status_code >= 300:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:200]}")
