"""A producer attached to a topic, with Pulsar's access modes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from magnetar.core.sinks import ProducerSink
from magnetar.core.stats import RateCounter


class AccessMode(IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


@dataclass(eq=False)
class Producer:
    producer_id: int
    producer_name: str
    sink: ProducerSink
    access_mode: AccessMode = AccessMode.Shared
    epoch: int = 0
    user_provided_name: bool = True
    address: str = ""
    client_version: str = ""
    connected_since: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    msg_in: RateCounter = field(default_factory=RateCounter)
    closed: bool = False

    def __hash__(self) -> int:
        return id(self)

    @property
    def exclusive(self) -> bool:
        return self.access_mode != AccessMode.Shared
