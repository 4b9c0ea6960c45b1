"""What core asks the outside world to do: the seams between core and the server shell.

Core never writes to sockets. A consumer or producer holds a sink; the server's
connection implements it by encoding frames, tests implement it by recording calls.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.core.positions import Position
from magnetar.core.topics.producer import ProducerSink


class ConsumerSink(Protocol):
    def send_message(
        self,
        consumer_id: int,
        pos: Position,
        partition: int,
        entry: bytes,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def reached_end_of_topic(self, consumer_id: int) -> None:
        """The topic was terminated and the consumer has received every message."""
        ...

    def close_consumer(self, consumer_id: int) -> None:
        """The broker detaches the consumer; the client reconnects (unload, seek, delete)."""
        ...


__all__ = ["ConsumerSink", "ProducerSink"]
