"""The simulated official clients' state, as the command simulation keeps it: a producer's
unreceipted sends, a consumer's queue and what it holds unacknowledged."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.testing.sim.command_checkers import ConsumerKey
from magnetar.testing.sim.sim_connection import Message, SimConnection


@dataclass(eq=False)
class ProducerClient:
    name: str
    topic: str
    address: str
    dedup: bool
    producer_id: int = 1
    conn: SimConnection | None = None
    #: "closed" (to create), "creating" (PRODUCER sent), "ready"
    state: str = "closed"
    request_id: int = 0
    next_sequence_id: int = 0
    #: not receipted: sequence id -> entry, in send order
    pending: dict[int, bytes] = field(default_factory=dict)
    #: sent on this producer registration and not answered, in order
    in_flight: list[int] = field(default_factory=list)


@dataclass(eq=False)
class ConsumerClient:
    name: str
    topic: str
    subscription: str
    sub_type: str
    address: str
    queue_size: int
    consumer_id: int = 1
    conn: SimConnection | None = None
    #: "closed" (to subscribe), "subscribing", "ready", "gone" (unsubscribed)
    state: str = "closed"
    request_id: int = 0
    queue: list[Message] = field(default_factory=list)
    held: list[Message] = field(default_factory=list)
    #: request ids of UNSUBSCRIBE and SEEK commands waiting for their answer
    unsubscribe_request: int | None = None

    @property
    def key(self) -> ConsumerKey:
        return self.address, self.consumer_id
