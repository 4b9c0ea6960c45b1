"""A producer attached to a topic, with Pulsar's access modes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from magnetar.core.positions import Position
from magnetar.core.stats import RateCounter


class ProducerSink(Protocol):
    def send_receipt(self, producer_id: int, sequence_id: int, highest_sequence_id: int, pos: Position) -> None: ...

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        """Receipts for stored sends of one producer, in order: (sequence id, highest sequence
        id, position) each; what a sync made durable is answered a producer at a time."""
        ...

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None: ...

    def close_producer(self, producer_id: int) -> None: ...

    def producer_ready(self, producer: Producer) -> None:
        """A producer waiting for exclusive access (WaitForExclusive) got it."""
        ...


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
