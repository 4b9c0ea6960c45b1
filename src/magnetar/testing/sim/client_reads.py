"""What the simulated clients do with what the broker writes to their connections, read in
the order it was written: the official clients' reactions (a producer resends after an error,
a consumer grants permits once subscribed), each reported to the checker."""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from magnetar.testing.sim.command_checkers import CommandChecker, CommandViolation
from magnetar.testing.sim.command_clients import ConsumerClient, ProducerClient
from magnetar.testing.sim.sim_connection import Message, Receipt, SimConnection, Written
from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand


class ClientWorld(Protocol):
    """What the clients' reactions use of the world."""

    checker: CommandChecker
    connections: dict[str, SimConnection]
    written: deque[tuple[SimConnection, Written]]
    by_address: dict[str, ProducerClient | ConsumerClient]
    events: list[str] | None
    trace: Any
    now: int
    send_errors: int

    def send(self, client: ProducerClient | ConsumerClient, cmd: pb.BaseCommand) -> None: ...

    def send_entries(self, client: ProducerClient, entries: list[tuple[int, bytes]]) -> None: ...

    def drop_connection(self, client: ProducerClient | ConsumerClient) -> None: ...

    def consumer_gone(self, client: ConsumerClient) -> None: ...


def describe(cmd: pb.BaseCommand) -> str:
    body = T.DESCRIPTOR.fields_by_number.get(cmd.type)
    return T.Type.Name(cmd.type) + (f" {getattr(cmd, body.name)}" if body is not None else "")



class ClientReads:
    def __init__(self, world: ClientWorld) -> None:
        self.world = world

    def read_all(self) -> None:
        """Clients read what the broker wrote, in the order it wrote it."""
        written = self.world.written
        while written:
            conn, item = written.popleft()
            self._read(conn, item)
        for conn in self.world.connections.values():
            if conn.failures:
                raise CommandViolation(f"a command on {conn.address} failed inside the broker: "
                                       f"{conn.failures[0]!r}") from conn.failures[0]

    def _read(self, conn: SimConnection, item: pb.BaseCommand | Message | Receipt) -> None:
        if self.world.events is not None:
            text = describe(item) if isinstance(item, pb.BaseCommand) else repr(item)[:120]
            self.world.events.append(f"    {conn.address} <- {' '.join(text.split())}")
        if isinstance(item, Message):
            self._message(conn, item)
        elif isinstance(item, Receipt):
            self._receipt(conn, item)
        else:
            self._command(conn, item)

    def _message(self, conn: SimConnection, msg: Message) -> None:
        client = self.world.by_address.get(conn.address)
        assert isinstance(client, ConsumerClient)
        if client.conn is not conn or client.state != "ready" or msg.consumer_id != client.consumer_id:
            return
        self.world.trace.update(f"{conn.address}<{msg.pos}:{msg.redelivery_count};".encode())
        self.world.checker.delivered(client.key, msg.pos, self.world.now)
        client.queue.append(msg)

    def _receipt(self, conn: SimConnection, receipt: Receipt) -> None:
        client = self.world.by_address.get(conn.address)
        assert isinstance(client, ProducerClient)
        if client.conn is not conn or receipt.producer_id != client.producer_id:
            return
        seq = receipt.sequence_id
        self.world.trace.update(f"{conn.address}r{seq}@{receipt.pos};".encode())
        if client.in_flight and client.in_flight[0] != seq:
            raise CommandViolation(f"{client.name}: receipt for {seq} while {client.in_flight[0]}, sent before it, "
                                   "is unanswered")
        if seq in client.in_flight:
            client.in_flight.remove(seq)
        if client.pending.pop(seq, None) is not None:
            self.world.checker.receipt((client.topic, client.name, seq))

    def _command(self, conn: SimConnection, cmd: pb.BaseCommand) -> None:
        client = self.world.by_address.get(conn.address)
        if client is None or client.conn is not conn:
            return
        if isinstance(client, ProducerClient):
            self._producer_command(client, cmd)
        else:
            self._consumer_command(client, cmd)

    def _producer_command(self, client: ProducerClient, cmd: pb.BaseCommand) -> None:
        if cmd.type == T.PRODUCER_SUCCESS and client.state == "creating":
            client.state = "ready"
            client.in_flight.clear()
            self.world.send_entries(client, list(client.pending.items()))  # what was not receipted, again
        elif cmd.type == T.ERROR and client.state == "creating":
            client.state = "closed"
        elif cmd.type == T.SEND_ERROR:
            self.world.send_errors += 1
            self.world.drop_connection(client)  # the Java client closes the connection and resends
        elif cmd.type == T.CLOSE_PRODUCER:
            client.state = "closed"
            client.in_flight.clear()

    def _consumer_command(self, client: ConsumerClient, cmd: pb.BaseCommand) -> None:
        if cmd.type in (T.SUCCESS, T.ERROR) and client.unsubscribe_request in (cmd.success.request_id,
                                                                                cmd.error.request_id):
            client.unsubscribe_request = None
            self.world.checker.unsubscribe_answered(client.topic, client.subscription)
        elif cmd.type == T.SUCCESS and client.state == "subscribing" and cmd.success.request_id == client.request_id:
            client.state = "ready"
            self.world.checker.subscribed(client.key)
            self.world.send(client, T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=client.consumer_id,
                                                                  messagePermits=client.queue_size)))
        elif cmd.type == T.ERROR and client.state == "subscribing" and cmd.error.request_id == client.request_id:
            self.world.checker.detached(client.key)
            client.state = "closed"
        elif cmd.type == T.ACTIVE_CONSUMER_CHANGE and client.state in ("ready", "subscribing"):
            self.world.checker.active_change(client.key, cmd.active_consumer_change.is_active)
        elif cmd.type == T.CLOSE_CONSUMER and cmd.close_consumer.consumer_id == client.consumer_id:
            self.world.consumer_gone(client)
