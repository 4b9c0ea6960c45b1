"""A broker's load report: what the load manager decides from.

Pulsar's ``LocalBrokerData`` (the data of ``/loadbalance/brokers/<broker>`` under the
modular load manager) with the fields that have a meaning here: the process's CPU usage,
the bandwidth in and out, message rates and throughputs, topics, producers, consumers and
bundles in total, and per bundle Pulsar's ``NamespaceBundleStats`` (``lastStats``). The
JSON carries Pulsar's field names, so a tool that reads Pulsar's reports reads these.

Resource usages are :class:`ResourceUsage` (``usage`` of ``limit``, Pulsar's
``ResourceUsage``); a broker's load for shedding and placement is the largest weighted
usage (Pulsar's ``getMaxResourceUsageWithWeight``), a fraction where 1.0 is 100 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

MEGABYTE = 1024 * 1024


class InvalidLoadReport(ValueError):
    """A load report whose JSON does not hold what it must."""


@dataclass(frozen=True, slots=True)
class BundleStats:
    """One bundle's traffic on its owner (Pulsar's ``NamespaceBundleStats``)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    consumer_count: int = 0
    producer_count: int = 0
    topics: int = 0

    @property
    def msg_rate(self) -> float:
        """Messages in and out per second."""
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        """Bytes in and out per second."""
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def sessions(self) -> int:
        """Producers and consumers."""
        return self.consumer_count + self.producer_count

    def __add__(self, other: BundleStats) -> BundleStats:
        return BundleStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, Any]:
        return {"msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
                "msgThroughputIn": self.msg_throughput_in, "msgThroughputOut": self.msg_throughput_out,
                "consumerCount": self.consumer_count, "producerCount": self.producer_count,
                "topics": self.topics}

    @classmethod
    def from_json(cls, data: Any) -> BundleStats:
        if not isinstance(data, dict):
            raise InvalidLoadReport(f"bundle stats must be an object, not {data!r}")
        return cls(_number(data, "msgRateIn"), _number(data, "msgRateOut"), _number(data, "msgThroughputIn"),
                   _number(data, "msgThroughputOut"), int(_number(data, "consumerCount")),
                   int(_number(data, "producerCount")), int(_number(data, "topics")))


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """``usage`` of ``limit`` (Pulsar's ``ResourceUsage``); a limit of 0 or less means unknown."""

    usage: float = 0.0
    limit: float = 0.0

    @property
    def percent_usage(self) -> float:
        return self.usage / self.limit * 100 if self.limit > 0 else 0.0

    def to_json(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}

    @classmethod
    def from_json(cls, data: Any) -> ResourceUsage:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise InvalidLoadReport(f"a resource usage must be an object, not {data!r}")
        return cls(_number(data, "usage"), _number(data, "limit"))


@dataclass(frozen=True, slots=True)
class ResourceWeights:
    """Pulsar's ``loadBalancerCPUResourceWeight``, ``loadBalancerBandwithInResourceWeight`` and
    ``loadBalancerBandwithOutResourceWeight`` (memory is not a load balancing item since
    Pulsar 3.0, and a Python process has no direct memory)."""

    cpu: float = 1.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0


@dataclass(frozen=True, slots=True)
class BrokerLoadReport:
    """What one broker publishes about its load (Pulsar's ``LocalBrokerData``)."""

    cpu: ResourceUsage = ResourceUsage()
    bandwidth_in: ResourceUsage = ResourceUsage()
    bandwidth_out: ResourceUsage = ResourceUsage()
    #: per bundle (``tenant/ns/0x..._0x...``), Pulsar's ``lastStats``
    bundles: Mapping[str, BundleStats] = field(default_factory=dict)
    #: when it was measured, milliseconds since the epoch (Pulsar's ``lastUpdate``)
    last_update: int = 0

    @property
    def totals(self) -> BundleStats:
        total = BundleStats()
        for stats in self.bundles.values():
            total = total + stats
        return total

    def max_resource_usage_with_weight(self, weights: ResourceWeights) -> float:
        """The largest weighted usage, as a fraction (1.0 is 100 %)."""
        return max(self.cpu.percent_usage * weights.cpu, self.bandwidth_in.percent_usage * weights.bandwidth_in,
                   self.bandwidth_out.percent_usage * weights.bandwidth_out) / 100

    def with_update(self, last_update: int) -> BrokerLoadReport:
        return replace(self, last_update=last_update)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``LocalBrokerData`` fields (the broker's URLs are the registration's)."""
        total = self.totals
        return {
            "cpu": self.cpu.to_json(), "bandwidthIn": self.bandwidth_in.to_json(),
            "bandwidthOut": self.bandwidth_out.to_json(),
            "msgRateIn": total.msg_rate_in, "msgRateOut": total.msg_rate_out,
            "msgThroughputIn": total.msg_throughput_in, "msgThroughputOut": total.msg_throughput_out,
            "numTopics": total.topics, "numConsumers": total.consumer_count,
            "numProducers": total.producer_count, "numBundles": len(self.bundles),
            "bundles": sorted(self.bundles), "lastStats": {b: s.to_json() for b, s in sorted(self.bundles.items())},
            "lastUpdate": self.last_update,
        }

    @classmethod
    def from_json(cls, data: Any) -> BrokerLoadReport:
        """The report in a registration's data; one without load fields (a broker that has
        not reported yet) is an empty report."""
        if not isinstance(data, dict):
            raise InvalidLoadReport(f"a load report must be an object, not {data!r}")
        stats = data.get("lastStats")
        stats = {} if stats is None else stats
        if not isinstance(stats, dict):
            raise InvalidLoadReport("lastStats must map bundles to their stats")
        return cls(ResourceUsage.from_json(data.get("cpu")), ResourceUsage.from_json(data.get("bandwidthIn")),
                   ResourceUsage.from_json(data.get("bandwidthOut")),
                   {str(b): BundleStats.from_json(s) for b, s in stats.items()}, int(_number(data, "lastUpdate")))


def _number(data: dict[str, Any], key: str) -> float:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidLoadReport(f"{key} must be a number, not {value!r}")
    return float(value)
