"""Shedding toward an even spread: Pulsar's ``TransferShedder`` idea.

While the standard deviation of the brokers' loads is above
``loadBalancerBrokerLoadTargetStd`` (0.25, where 1.0 is 100 % load), the most loaded broker
gives the least loaded one half of their difference, bundle by bundle (the largest first,
each one that brings the load moved nearer to that half); each broker takes part once a
cycle, in at most ``loadBalancerMaxNumberOfBrokerSheddingPerCycle`` pairs. With
``loadBalancerTransferEnabled`` each decision names its destination (the leader then places
the bundle there when its clients look it up); without, the placement chooses.

The waits between cycles, the grace period and the minimum throughput are the threshold
shedder's (:class:`~magnetar.core.cluster.threshold_shedder.ThresholdShedder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import pstdev

from magnetar.core.cluster.load_report import MEGABYTE, BrokerLoadReport
from magnetar.core.cluster.threshold_shedder import (
    ShedderConfig,
    SheddingResult,
    Skipped,
    ThresholdShedder,
)

DEFAULT_CONFIG = ShedderConfig()


class TransferShedder(ThresholdShedder):
    def __init__(self, config: ShedderConfig = DEFAULT_CONFIG, target_std: float = 0.25,
                 transfer_enabled: bool = True) -> None:
        super().__init__(config)
        self.target_std = target_std
        self.transfer_enabled = transfer_enabled

    def _decide(self, reports: Mapping[str, BrokerLoadReport], loads: dict[str, float], now_ms: int) \
            -> SheddingResult:
        loads = dict(loads)
        result = SheddingResult()
        paired: set[str] = set()
        while len(paired) // 2 < self.config.max_brokers_per_cycle:
            std = pstdev(loads.values())
            free = [b for b in loads if b not in paired]
            if std <= self.target_std or len(free) < 2:
                break
            source = max(free, key=lambda b: (loads[b], b))
            target = min(free, key=lambda b: (loads[b], b))
            paired |= {source, target}
            moved = self._move(source, target, reports[source], loads, std, now_ms, result)
            loads[source] -= moved
            loads[target] += moved
        return result

    def _move(self, source: str, target: str, report: BrokerLoadReport, loads: dict[str, float], std: float,
              now_ms: int, result: SheddingResult) -> float:
        """Mark ``source``'s bundles for ``target``; the load moved."""
        throughput = report.totals.msg_throughput
        gap = (loads[source] - loads[target]) / 2
        why = (f"load std {std:.2f} > loadBalancerBrokerLoadTargetStd {self.target_std:g}: {source} at "
               f"{loads[source]:.1%} gives {target} at {loads[target]:.1%} half their difference")
        if throughput <= 0 or loads[source] <= 0:
            result.skipped.append(Skipped(source, f"{why}, but it has no traffic to move"))
            return 0.0
        per_byte = loads[source] / throughput
        to_offload = gap / per_byte
        if to_offload < self.config.min_throughput_threshold_mbytes * MEGABYTE:
            result.skipped.append(Skipped(source, f"{why}, but {to_offload / MEGABYTE:.3f} MB/s is under "
                                                  f"loadBalancerBundleUnloadMinThroughputThreshold"))
            return 0.0
        marked = self._mark(source, report, to_offload, why, target if self.transfer_enabled else None, now_ms,
                            result)
        if not marked:
            result.skipped.append(Skipped(source, f"{why}, but no bundle of it fits"))
        return marked * per_byte
