"""The load manager's settings: Pulsar's ``LoadBalancerConfiguration`` keys and defaults.

They are read from the broker's configuration (``broker.conf``, ``--set key=value``), where
the broker keeps the keys it does not know itself; a bad value is a
:class:`~magnetar.core.broker.broker_config.ConfigError` naming the key. Durations in
minutes take fractions here (``loadBalancerSheddingIntervalMinutes=0.05`` is 3 s), which
Pulsar's integer keys do not; a whole number reads the same in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from magnetar.core.broker.broker_config import ConfigError
from magnetar.core.cluster.bundle_split import RANGE_EQUALLY_DIVIDE, SPLIT_ALGORITHMS, SplitConfig
from magnetar.core.cluster.least_resource_usage import PlacementConfig
from magnetar.core.cluster.load_report import ResourceWeights
from magnetar.core.cluster.threshold_shedder import MINUTE_MS, ShedderConfig, ThresholdShedder
from magnetar.core.cluster.transfer_shedder import TransferShedder

THRESHOLD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
TRANSFER_SHEDDER = "org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder"


@dataclass(frozen=True)
class LoadBalancerConfig:
    loadBalancerEnabled: bool = True
    loadBalancerReportUpdateMinIntervalMillis: int = 5000
    loadBalancerSheddingEnabled: bool = True
    loadBalancerLoadSheddingStrategy: str = THRESHOLD_SHEDDER
    loadBalancerBrokerLoadTargetStd: float = 0.25
    loadBalancerTransferEnabled: bool = True
    loadBalancerSheddingIntervalMinutes: float = 1
    loadBalancerSheddingGracePeriodMinutes: float = 30
    loadBalancerBrokerThresholdShedderPercentage: float = 10
    loadBalancerMaxNumberOfBrokerSheddingPerCycle: int = 3
    loadBalancerHistoryResourcePercentage: float = 0.9
    loadBalancerBundleUnloadMinThroughputThreshold: float = 10
    loadBalancerCPUResourceWeight: float = 1.0
    loadBalancerBandwithInResourceWeight: float = 1.0
    loadBalancerBandwithOutResourceWeight: float = 1.0
    #: None: the NIC speed is unknown and bandwidth weighs nothing (Pulsar reads it from the NIC)
    loadBalancerOverrideBrokerNicSpeedGbps: float | None = None
    loadBalancerAverageResourceUsageDifferenceThresholdPercentage: float = 10
    loadBalancerBrokerOverloadedThresholdPercentage: float = 85
    loadBalancerDistributeBundlesEvenlyEnabled: bool = True
    loadBalancerAutoBundleSplitEnabled: bool = True
    loadBalancerAutoUnloadSplitBundlesEnabled: bool = True
    loadBalancerNamespaceBundleMaxTopics: int = 1000
    loadBalancerNamespaceBundleMaxSessions: int = 1000
    loadBalancerNamespaceBundleMaxMsgRate: float = 30000
    loadBalancerNamespaceBundleMaxBandwidthMbytes: float = 100
    loadBalancerNamespaceMaximumBundles: int = 128
    loadBalancerMaxNumberOfBundlesToSplitPerCycle: int = 10
    loadBalancerSplitIntervalMinutes: float = 1
    loadBalancerResourceQuotaUpdateIntervalMinutes: float = 15
    defaultNamespaceBundleSplitAlgorithm: str = RANGE_EQUALLY_DIVIDE

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> LoadBalancerConfig:
        """The settings among ``properties`` (other keys are left alone), checked."""
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name in properties:
                values[f.name] = _parse(f.name, properties[f.name], str(f.type))
        config = cls(**values)  # type: ignore[arg-type]
        config.validate()
        return config

    def validate(self) -> None:
        positive = ("loadBalancerReportUpdateMinIntervalMillis", "loadBalancerSheddingIntervalMinutes",
                    "loadBalancerMaxNumberOfBrokerSheddingPerCycle", "loadBalancerNamespaceMaximumBundles",
                    "loadBalancerMaxNumberOfBundlesToSplitPerCycle", "loadBalancerSplitIntervalMinutes",
                    "loadBalancerResourceQuotaUpdateIntervalMinutes")
        for key in positive:
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key}={getattr(self, key)} must be greater than 0")
        for key in ("loadBalancerSheddingGracePeriodMinutes", "loadBalancerBrokerThresholdShedderPercentage",
                    "loadBalancerBundleUnloadMinThroughputThreshold", "loadBalancerCPUResourceWeight",
                    "loadBalancerBandwithInResourceWeight", "loadBalancerBandwithOutResourceWeight",
                    "loadBalancerAverageResourceUsageDifferenceThresholdPercentage",
                    "loadBalancerNamespaceBundleMaxTopics", "loadBalancerNamespaceBundleMaxMsgRate",
                    "loadBalancerNamespaceBundleMaxBandwidthMbytes"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}={getattr(self, key)} must not be negative")
        if not 0 <= self.loadBalancerHistoryResourcePercentage < 1:
            raise ConfigError(f"loadBalancerHistoryResourcePercentage={self.loadBalancerHistoryResourcePercentage} "
                              "must be at least 0 and less than 1")
        nic = self.loadBalancerOverrideBrokerNicSpeedGbps
        if nic is not None and nic <= 0:
            raise ConfigError(f"loadBalancerOverrideBrokerNicSpeedGbps={nic} must be greater than 0")
        if self.loadBalancerLoadSheddingStrategy not in (THRESHOLD_SHEDDER, TRANSFER_SHEDDER):
            raise ConfigError(f"loadBalancerLoadSheddingStrategy={self.loadBalancerLoadSheddingStrategy!r}: use "
                              f"{THRESHOLD_SHEDDER} or {TRANSFER_SHEDDER}")
        if self.loadBalancerBrokerLoadTargetStd < 0:
            raise ConfigError(f"loadBalancerBrokerLoadTargetStd={self.loadBalancerBrokerLoadTargetStd} "
                              "must not be negative")
        if self.defaultNamespaceBundleSplitAlgorithm not in SPLIT_ALGORITHMS:
            raise ConfigError(f"defaultNamespaceBundleSplitAlgorithm={self.defaultNamespaceBundleSplitAlgorithm!r}: "
                              f"use one of {', '.join(SPLIT_ALGORITHMS)}")

    @property
    def weights(self) -> ResourceWeights:
        return ResourceWeights(self.loadBalancerCPUResourceWeight, self.loadBalancerBandwithInResourceWeight,
                               self.loadBalancerBandwithOutResourceWeight)

    @property
    def shedder(self) -> ShedderConfig:
        return ShedderConfig(self.loadBalancerBrokerThresholdShedderPercentage,
                             self.loadBalancerHistoryResourcePercentage,
                             int(self.loadBalancerSheddingGracePeriodMinutes * MINUTE_MS),
                             self.loadBalancerMaxNumberOfBrokerSheddingPerCycle,
                             self.loadBalancerBundleUnloadMinThroughputThreshold, self.weights)

    def make_shedder(self) -> ThresholdShedder:
        """The shedder ``loadBalancerLoadSheddingStrategy`` names."""
        if self.loadBalancerLoadSheddingStrategy == TRANSFER_SHEDDER:
            return TransferShedder(self.shedder, self.loadBalancerBrokerLoadTargetStd, self.loadBalancerTransferEnabled)
        return ThresholdShedder(self.shedder)

    @property
    def placement(self) -> PlacementConfig:
        return PlacementConfig(self.loadBalancerAverageResourceUsageDifferenceThresholdPercentage,
                               self.loadBalancerBrokerOverloadedThresholdPercentage,
                               self.loadBalancerDistributeBundlesEvenlyEnabled)

    @property
    def split(self) -> SplitConfig:
        return SplitConfig(self.loadBalancerAutoBundleSplitEnabled, self.loadBalancerNamespaceBundleMaxTopics,
                           self.loadBalancerNamespaceBundleMaxSessions, self.loadBalancerNamespaceBundleMaxMsgRate,
                           self.loadBalancerNamespaceBundleMaxBandwidthMbytes,
                           self.loadBalancerNamespaceMaximumBundles,
                           self.loadBalancerMaxNumberOfBundlesToSplitPerCycle)

    @property
    def nic_speed_kbytes(self) -> float:
        """The bandwidth limit of a report, KB/s (0: unknown)."""
        gbps = self.loadBalancerOverrideBrokerNicSpeedGbps
        return 0.0 if gbps is None else gbps * 1e9 / 8 / 1024


def _parse(key: str, raw: str, kind: str) -> object:
    text = raw.strip()
    try:
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "float | None":
            return float(text) if text else None
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected {kind.replace(' | None', '')}") from None
    return text


#: the keys a cluster's broker reads here (the rest of the broker's settings are BrokerConfig's)
LOAD_BALANCER_KEYS = frozenset(f.name for f in fields(LoadBalancerConfig))
