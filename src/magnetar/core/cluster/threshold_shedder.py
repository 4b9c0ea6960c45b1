"""Which bundles the leader unloads from overloaded brokers: Pulsar's ``ThresholdShedder``.

Every cycle the leader passes the brokers' latest reports and the time. Each broker's load
is its largest weighted resource usage, smoothed over cycles
(``loadBalancerHistoryResourcePercentage``, 0.9: the old value's weight). A broker whose
load is above the cluster's average by more than
``loadBalancerBrokerThresholdShedderPercentage`` (10 points) sheds the part of its traffic
that brings it back to the average plus the threshold less a margin of 5 points: its
bundles by throughput, largest first, each one that brings the throughput marked nearer to
that part than it was (Pulsar marks until it reaches the part, which with large bundles
sheds far more than needed and makes the bundles swing between brokers). It
sheds nothing when that part is under ``loadBalancerBundleUnloadMinThroughputThreshold``
(10 MB/s), when it owns a single bundle, or from bundles unloaded less than
``loadBalancerSheddingGracePeriodMinutes`` (30) ago. At most
``loadBalancerMaxNumberOfBrokerSheddingPerCycle`` (3) brokers shed in one cycle, the most
loaded first.

Two refinements over Pulsar's: the part to shed is a fraction of the broker's own load
(Pulsar multiplies its throughput by the difference in usage points, which sheds too little
from a broker far below 100 %); and after a cycle that shed, the next waits until every
involved broker has reported again, and restarts their smoothing from that report, so the
shedder does not shed twice for one excess while the reports still show the traffic that
already moved. It also waits (up to ``settle_timeout_ms``, a minute) until each bundle it
unloaded is reported again, with its topics, by its new owner: until then the traffic in
flight is in nobody's report, the average looks lower than it is, and the broker that just
shed would look overloaded still.

Every decision, and every broker skipped although above the threshold, carries its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.core.cluster.load_report import MEGABYTE, BrokerLoadReport, ResourceWeights

#: the margin below the threshold a shedding broker is brought to (Pulsar's ADDITIONAL_THRESHOLD_PERCENT_MARGIN)
ADDITIONAL_THRESHOLD_MARGIN = 0.05
MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class ShedderConfig:
    threshold_percentage: float = 10.0
    history_percentage: float = 0.9
    grace_period_ms: int = 30 * MINUTE_MS
    max_brokers_per_cycle: int = 3
    min_throughput_threshold_mbytes: float = 10.0
    weights: ResourceWeights = ResourceWeights()
    settle_timeout_ms: int = MINUTE_MS


@dataclass(frozen=True, slots=True)
class UnloadDecision:
    broker: str
    bundle: str
    reason: str
    #: where the bundle goes (a transfer), None: wherever the placement sends it
    destination: str | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    broker: str
    reason: str


@dataclass(frozen=True, slots=True)
class SheddingResult:
    unloads: list[UnloadDecision] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


class ThresholdShedder:
    """The shedder's memory between cycles: smoothed loads, recent unloads, the last shedding."""

    def __init__(self, config: ShedderConfig = ShedderConfig()) -> None:
        self.config = config
        self.smoothed: dict[str, float] = {}
        #: bundle -> when it was last unloaded
        self.recently_unloaded: dict[str, int] = {}
        #: brokers of the last cycle that shed -> when, until each has reported again
        self._awaiting_reports: dict[str, int] = {}
        #: bundles unloaded -> (from which broker, when), until a new owner reports them with their topics
        self._moving: dict[str, tuple[str, int]] = {}

    def find_bundles_for_unloading(self, reports: Mapping[str, BrokerLoadReport], now_ms: int) -> SheddingResult:
        """This cycle's decisions from the registered brokers' reports."""
        self._forget_old_unloads(now_ms)
        stale = sorted(b for b, at in self._awaiting_reports.items() if b in reports and reports[b].last_update <= at)
        if stale:
            return SheddingResult(skipped=[Skipped(b, "waiting for its load report after the last shedding")
                                           for b in stale])
        self._awaiting_reports.clear()
        reported = {(broker, bundle) for broker, report in reports.items()
                    for bundle, stats in report.bundles.items() if stats.topics}
        self._moving = {bundle: (source, at) for bundle, (source, at) in self._moving.items()
                        if not any((b, bundle) in reported for b in reports if b != source)
                        and now_ms - at < self.config.settle_timeout_ms}
        if self._moving:
            return SheddingResult(skipped=[Skipped(b, f"waiting for {len(self._moving)} bundles it unloaded to be "
                                                      f"reported by their new owners") for b in sorted(reports)])
        loads = self._smooth(reports)
        if len(loads) < 2:
            return SheddingResult()
        result = self._decide(reports, loads, now_ms)
        for broker in {d.broker for d in result.unloads}:
            self._awaiting_reports[broker] = reports[broker].last_update
            self.smoothed.pop(broker, None)
        self._moving.update((d.bundle, (d.broker, now_ms)) for d in result.unloads)
        return result

    def _decide(self, reports: Mapping[str, BrokerLoadReport], loads: dict[str, float], now_ms: int) \
            -> SheddingResult:
        average = sum(loads.values()) / len(loads)
        threshold = self.config.threshold_percentage / 100
        over = sorted((b for b, load in loads.items() if load > average + threshold), key=lambda b: (-loads[b], b))
        result = SheddingResult()
        for broker in over:
            if len({d.broker for d in result.unloads}) >= self.config.max_brokers_per_cycle:
                result.skipped.append(Skipped(broker, f"above the threshold, but {self.config.max_brokers_per_cycle} "
                                                      f"brokers already shed in this cycle"))
                continue
            self._shed(broker, reports[broker], loads[broker], average, now_ms, result)
        return result

    def _shed(self, broker: str, report: BrokerLoadReport, load: float, average: float, now_ms: int,
              result: SheddingResult) -> None:
        threshold = self.config.threshold_percentage / 100
        target = average + threshold - ADDITIONAL_THRESHOLD_MARGIN
        share = (load - target) / load
        throughput = report.totals.msg_throughput
        to_offload = throughput * share
        why = (f"load {load:.1%} is above the average {average:.1%} by more than {threshold:.0%}: "
               f"shedding {share:.0%} of its traffic")
        minimum = self.config.min_throughput_threshold_mbytes * MEGABYTE
        if to_offload < minimum:
            result.skipped.append(Skipped(broker, f"{why}, but {to_offload / MEGABYTE:.3f} MB/s is under "
                                                  f"loadBalancerBundleUnloadMinThroughputThreshold"))
            return
        if len(report.bundles) < 2:
            result.skipped.append(Skipped(broker, f"{why}, but it owns {len(report.bundles)} bundle"))
            return
        marked = self._mark(broker, report, to_offload, why, None, now_ms, result)
        if not marked:
            result.skipped.append(Skipped(broker, f"{why}, but every bundle was unloaded within the grace period"))

    def _mark(self, broker: str, report: BrokerLoadReport, to_offload: float, why: str, destination: str | None,
              now_ms: int, result: SheddingResult) -> float:
        """Unload decisions for ``broker``'s bundles, the largest first, each one that brings the
        throughput marked nearer to ``to_offload`` (it keeps one bundle at least); the throughput marked."""
        candidates = sorted(((stats.msg_throughput, bundle) for bundle, stats in report.bundles.items()
                             if bundle not in self.recently_unloaded and stats.msg_throughput > 0),
                            key=lambda item: (-item[0], item[1]))[:len(report.bundles) - 1]
        marked = 0.0
        for bundle_throughput, bundle in candidates:
            if marked + bundle_throughput - to_offload >= to_offload - marked:
                continue  # it would overshoot by more than what is left to shed: a smaller one may fit
            marked += bundle_throughput
            self.recently_unloaded[bundle] = now_ms
            result.unloads.append(UnloadDecision(broker, bundle, f"{why}; {bundle_throughput / MEGABYTE:.3f} MB/s",
                                                 destination))
        return marked

    def _smooth(self, reports: Mapping[str, BrokerLoadReport]) -> dict[str, float]:
        history = self.config.history_percentage
        loads: dict[str, float] = {}
        for broker, report in reports.items():
            current = report.max_resource_usage_with_weight(self.config.weights)
            previous = self.smoothed.get(broker)
            loads[broker] = current if previous is None else previous * history + current * (1 - history)
        self.smoothed = dict(loads)
        return loads

    def _forget_old_unloads(self, now_ms: int) -> None:
        grace = self.config.grace_period_ms
        self.recently_unloaded = {b: at for b, at in self.recently_unloaded.items() if now_ms - at < grace}
