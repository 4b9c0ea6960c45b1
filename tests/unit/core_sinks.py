"""A consumer/producer sink for core tests: records what the broker would send to a client."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.core.positions import Position


@dataclass
class RecordingSink:
    messages: list[Position] = field(default_factory=list)
    active: dict[int, bool] = field(default_factory=dict)
    ended: list[int] = field(default_factory=list)
    closed_producers: list[int] = field(default_factory=list)

    def send_message(self, consumer_id: int, pos: Position, partition: int, entry: bytes,
                     redelivery_count: int, ack_set: list[int] | None) -> None:
        self.messages.append(pos)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.active[consumer_id] = is_active

    def reached_end_of_topic(self, consumer_id: int) -> None:
        self.ended.append(consumer_id)

    def close_consumer(self, consumer_id: int) -> None: ...
    def send_receipt(self, *args: object) -> None: ...
    def send_receipts(self, *args: object) -> None: ...
    def send_error(self, *args: object) -> None: ...

    def close_producer(self, producer_id: int) -> None:
        self.closed_producers.append(producer_id)

    def producer_ready(self, *args: object) -> None: ...
