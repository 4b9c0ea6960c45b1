"""A client's producer and consumer sent together to the broker a bundle is handed to.

Both commands wait on the bundle's ownership side by side; one of them takes it. Each must
be answered: the one whose own wait did not take the bundle is served all the same, since
the broker owns it by then (it once went unanswered, and the client waited out its 30 s
operation timeout). The membership runs over the in-memory metadata store; the command
handlers are stand-ins that record what they were asked."""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.broker.listeners import BrokerAddresses
from magnetar.core.names import TopicName
from magnetar.server.cluster_membership import ClusterMembership
from magnetar.storage.metadata_store import MemoryMetadataStore
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import Frame

T = pb.BaseCommand
TOPIC = "persistent://public/default/handed-over"


class LedgerIds:
    block = 16

    def restart_from(self, block: tuple[int, int]) -> None:
        self.start = block


class Shell:
    """What the membership reads of the broker; nothing is loaded here."""

    def __init__(self, config: BrokerConfig) -> None:
        self.addresses = BrokerAddresses(config)
        self.access = None
        self.topics: dict[str, Any] = {}
        self.successors: dict[str, tuple[str | None, str | None]] = {}
        self.release = None
        self.ledger_ids = LedgerIds()


class Conn:
    """A connection as finish_command uses it: errors are recorded, not written."""

    def __init__(self) -> None:
        self.errors: list[tuple[int, str]] = []

    def _run(self, cmd: pb.BaseCommand, work: Any) -> None:
        try:
            work()
        except Exception as exc:  # the broker's errors carry the code the client gets
            self.errors.append((cmd.type, str(exc)))


def frame(kind: int) -> Frame:
    cmd = T(type=kind)
    if kind == T.PRODUCER:
        cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = TOPIC, 1, 1
    else:
        cmd.subscribe.topic, cmd.subscribe.consumer_id, cmd.subscribe.request_id = TOPIC, 1, 2
        cmd.subscribe.subscription = "s"
    return Frame(cmd)


def test_a_producer_and_a_consumer_arriving_together_are_both_served() -> None:
    async def run() -> None:
        config = BrokerConfig(brokerServicePort=6650, webServicePort=8080, advertisedAddress="127.0.0.1")
        store = MemoryMetadataStore()
        membership = ClusterMembership(Shell(config), store, "127.0.0.1:8080", 30_000)  # type: ignore[arg-type]
        store.register_broker("127.0.0.1:8080", membership.registration())
        async def on_this_thread(call: Any, *args: Any) -> Any:  # the in-memory store is one thread's
            await asyncio.sleep(0)
            return call(*args)
        membership.calls.run = on_this_thread  # type: ignore[method-assign]
        served: list[int] = []
        def record(conn: Any, f: Frame) -> None:
            served.append(f.command.type)
        handlers = membership.handlers({T.LOOKUP: record, T.PRODUCER: record, T.SUBSCRIBE: record})
        conn = Conn()
        handlers[T.PRODUCER](conn, frame(T.PRODUCER))
        handlers[T.SUBSCRIBE](conn, frame(T.SUBSCRIBE))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while len(served) + len(conn.errors) < 2:
            assert loop.time() < deadline, f"answered: {served}, refused: {conn.errors}"
            await asyncio.sleep(0.005)
        assert not conn.errors
        assert sorted(served) == sorted([T.PRODUCER, T.SUBSCRIBE])
        assert membership.serves(TopicName.parse(TOPIC))
    asyncio.run(run())
