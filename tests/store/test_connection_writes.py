"""When a connection's outgoing frames reach the transport.

Frames a loop turn queues are written together when the turn ends; a connection that
gathered more than a few high-water marks writes them at once instead. A loop turn that
also takes in publishes from other connections can last milliseconds, and a consumer
fed one gathering per turn fell far behind its producers (the broker then read what it
missed back from the disk). The transport's own high-water mark still stops dispatch.

The broker runs in this process over real files; the transport is in memory and keeps
what it is given, as a socket whose reader stopped reading does.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.positions import Position
from magnetar.server.broker_service import BrokerService
from magnetar.server.connection import GATHER_MARKS, ServerConnection
from magnetar.testing.memory_transport import MemoryTransport

HIGH_WATER = 64 * 1024
ENTRY = b"e" * (100 * 1024)


class HoldingTransport(MemoryTransport):
    """Keeps every byte written to it and, like asyncio's transports, tells the protocol
    at once when its buffer passes the high-water mark."""

    def __init__(self, protocol: ServerConnection, accepts: bool) -> None:
        super().__init__(("127.0.0.1", 6650))
        self.protocol = protocol
        self.accepts = accepts
        self.buffered = 0
        self.paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if not self.accepts:
            self.buffered += len(data)
        if self.buffered > HIGH_WATER and not self.paused:
            self.paused = True
            self.protocol.pause_writing()


def with_connection(tmp_path: Path, accepts: bool,
                    scenario: Callable[[ServerConnection, HoldingTransport], Awaitable[None]]) -> None:
    async def run() -> None:
        config = BrokerConfig(brokerServicePort=0, webServicePort=0,
                              pulsarChannelWriteBufferHighWaterMark=HIGH_WATER,
                              pulsarChannelWriteBufferLowWaterMark=HIGH_WATER // 2)
        broker = BrokerService(config, tmp_path / "data")
        broker.start(asyncio.get_running_loop())
        try:
            conn = ServerConnection(broker)
            transport = HoldingTransport(conn, accepts)
            conn.connection_made(transport)  # type: ignore[arg-type]
            await scenario(conn, transport)
            conn.connection_lost(None)
        finally:
            await broker.close()
    asyncio.run(run())
    gc.collect()


def send(conn: ServerConnection, count: int) -> None:
    for entry_id in range(count):
        conn.send_message(1, Position(3, entry_id), -1, ENTRY, 0, None)


def test_a_large_dispatch_reaches_the_transport_within_the_loop_turn(tmp_path: Path) -> None:
    async def scenario(conn: ServerConnection, transport: HoldingTransport) -> None:
        send(conn, 3 * GATHER_MARKS)
        # no await since the sends: the loop turn has not ended
        assert transport.written > GATHER_MARKS * HIGH_WATER, "the gathered frames waited for the turn's end"
        assert not conn.consumers_paused, "dispatch stopped although the transport takes everything"
        await asyncio.sleep(0)
        assert transport.written >= 3 * GATHER_MARKS * len(ENTRY)
    with_connection(tmp_path, True, scenario)


def test_a_transport_above_high_water_still_stops_dispatch(tmp_path: Path) -> None:
    async def scenario(conn: ServerConnection, transport: HoldingTransport) -> None:
        sent = 0
        while not conn.consumers_paused:
            send(conn, 1)
            sent += 1
            assert sent <= GATHER_MARKS * HIGH_WATER // len(ENTRY) + 1, "dispatch was never stopped"
        # what the connection holds is bounded by its marks, not by the consumer's permits
        assert transport.buffered <= GATHER_MARKS * HIGH_WATER + 2 * len(ENTRY)
        await asyncio.sleep(0)
        assert conn.consumers_paused, "the end of the loop turn resumed a connection that cannot write"
    with_connection(tmp_path, False, scenario)
