"""Settings of producer deduplication, under the broker.conf keys Pulsar uses.

Corresponds to the ``brokerDeduplication*`` entries of Pulsar's ServiceConfiguration.
The defaults are Pulsar's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

#: broker.conf key -> DeduplicationConfig field.
CONFIG_KEYS: Mapping[str, str] = {
    "brokerDeduplicationEntriesInterval": "entries_interval",
    "brokerDeduplicationSnapshotIntervalSeconds": "snapshot_interval_s",
    "brokerDeduplicationSnapshotFrequencyInSeconds": "snapshot_frequency_s",
    "brokerDeduplicationMaxNumberOfProducers": "max_number_of_producers",
    "brokerDeduplicationProducerInactivityTimeoutMinutes": "producer_inactivity_timeout_minutes",
}


@dataclass(frozen=True, slots=True)
class DeduplicationConfig:
    """Limits and cadence of the sequence-id deduplication of one topic."""

    #: Persisted entries between two snapshots of the sequence-id map.
    entries_interval: int = 1000
    #: Longest time between two snapshots while entries keep arriving; 0 turns time-based snapshots off.
    snapshot_interval_s: int = 120
    #: How often the shell asks for a time-based snapshot (its timer, not a rule of the core).
    snapshot_frequency_s: int = 120
    #: Producers written into one snapshot; the rest stay in memory only.
    max_number_of_producers: int = 10000
    #: A producer that is not connected and silent for this long is forgotten.
    producer_inactivity_timeout_minutes: int = 360

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value < 0:
                key = next(k for k, v in CONFIG_KEYS.items() if v == field.name)
                raise ValueError(f"{key} must be >= 0, got {value}")

    @property
    def snapshot_interval_ms(self) -> int:
        return self.snapshot_interval_s * 1000

    @property
    def producer_inactivity_timeout_ms(self) -> int:
        return self.producer_inactivity_timeout_minutes * 60_000

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> DeduplicationConfig:
        """Read the ``brokerDeduplication*`` keys of a broker.conf; other keys are ignored."""
        values: dict[str, int] = {}
        for key, name in CONFIG_KEYS.items():
            if key not in properties:
                continue
            text = properties[key].strip()
            try:
                values[name] = int(text)
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {text!r}") from None
        return cls(**values)
