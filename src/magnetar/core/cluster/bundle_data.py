"""A bundle's traffic history as the leader keeps it: Pulsar's ``BundleData``.

Pulsar's modular load manager keeps, per bundle, a short-term (10 samples) and a long-term
(1000 samples) average of its rates and throughputs (``TimeAverageMessageData``) and its
number of topics, and writes them to ``/loadbalance/bundle-data/<tenant>/<ns>/<range>``.
Each sample weighs ``1/n`` until ``n`` reaches the number of samples, then ``1/max``: an
average over the first samples that turns into an exponential one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from magnetar.core.cluster.load_report import BundleStats, InvalidLoadReport

NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000


@dataclass(frozen=True, slots=True)
class TimeAverageMessageData:
    max_samples: int
    num_samples: int = 0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0

    def update(self, sample: BundleStats) -> TimeAverageMessageData:
        n = min(self.num_samples + 1, self.max_samples)

        def average(old: float, new: float) -> float:
            return ((n - 1) * old + new) / n
        return replace(self, num_samples=n,
                       msg_throughput_in=average(self.msg_throughput_in, sample.msg_throughput_in),
                       msg_throughput_out=average(self.msg_throughput_out, sample.msg_throughput_out),
                       msg_rate_in=average(self.msg_rate_in, sample.msg_rate_in),
                       msg_rate_out=average(self.msg_rate_out, sample.msg_rate_out))

    def to_json(self) -> dict[str, Any]:
        return {"maxSamples": self.max_samples, "numSamples": self.num_samples,
                "msgThroughputIn": self.msg_throughput_in, "msgThroughputOut": self.msg_throughput_out,
                "msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out}

    @classmethod
    def from_json(cls, data: Any) -> TimeAverageMessageData:
        if not isinstance(data, dict):
            raise InvalidLoadReport(f"time average data must be an object, not {data!r}")
        try:
            return cls(int(data["maxSamples"]), int(data["numSamples"]), float(data["msgThroughputIn"]),
                       float(data["msgThroughputOut"]), float(data["msgRateIn"]), float(data["msgRateOut"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidLoadReport(f"time average data {data!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class BundleData:
    short_term: TimeAverageMessageData = TimeAverageMessageData(NUM_SHORT_SAMPLES)
    long_term: TimeAverageMessageData = TimeAverageMessageData(NUM_LONG_SAMPLES)
    topics: int = 0

    def update(self, sample: BundleStats) -> BundleData:
        return BundleData(self.short_term.update(sample), self.long_term.update(sample), sample.topics)

    def to_json(self) -> dict[str, Any]:
        return {"shortTermData": self.short_term.to_json(), "longTermData": self.long_term.to_json(),
                "topics": self.topics}

    @classmethod
    def from_json(cls, data: Any) -> BundleData:
        if not isinstance(data, dict):
            raise InvalidLoadReport(f"bundle data must be an object, not {data!r}")
        topics = data.get("topics", 0)
        if isinstance(topics, bool) or not isinstance(topics, int):
            raise InvalidLoadReport(f"bundle data: topics must be a number, not {topics!r}")
        return cls(TimeAverageMessageData.from_json(data.get("shortTermData")),
                   TimeAverageMessageData.from_json(data.get("longTermData")), topics)
