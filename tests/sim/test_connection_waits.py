"""While a SUBSCRIBE or PRODUCER waits for its topic to load, its connection serves its
other producers and consumers; only the commands about the one being made wait for it.

A client has one connection per broker for all its producers and consumers. On a cluster a
load may wait seconds (a takeover waits for the store, and maybe for a previous owner's
lease); holding every command of the connection meanwhile would stall every other topic
of that client on that broker. Pulsar's broker serves them, and so does this one.
"""

from __future__ import annotations

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.storage.interfaces import LedgerConfig
from magnetar.testing.raw_client import flow, producer, subscribe
from magnetar.testing.sim.command_shell_twin import SimBroker, SimStorage
from magnetar.testing.sim.sim_connection import Message, Receipt, SimConnection
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

T = pb.BaseCommand
BUSY = "persistent://public/default/busy"
SLOW = "persistent://public/default/slow"


def send(producer_id: int, sequence_id: int) -> tuple[pb.BaseCommand, bytes]:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1_000)
    return (T(type=T.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, num_messages=1)),
            make_entry(metadata, b"m"))


def written(conn: SimConnection) -> list[object]:
    return [item for _, item in conn.written]


def ready_producer(broker: SimBroker, conn: SimConnection) -> None:
    conn.handle(producer(BUSY, producer_id=1, request_id=1, producer_name="p"))
    broker.finish_load(BUSY)
    broker.complete_metadata(100)
    assert [item.type for item in written(conn) if isinstance(item, pb.BaseCommand)] == [T.PRODUCER_SUCCESS]


def receipted(broker: SimBroker) -> None:
    broker.write(BUSY)
    broker.sync(BUSY)
    broker.deliver_reports(BUSY)


def test_a_topic_that_loads_holds_back_only_the_commands_about_it() -> None:
    broker = SimBroker(SimStorage(BrokerConfig(), lambda: 1_000, LedgerConfig()))
    conn = SimConnection(broker, "client-1")
    ready_producer(broker, conn)
    conn.handle(subscribe(SLOW, "s", consumer_id=5, request_id=2))
    conn.handle(flow(5, 100))  # about the consumer being made: waits for it
    conn.send_run([send(1, 0), send(1, 1)])  # another producer's: served now
    receipted(broker)
    assert [(r.producer_id, r.sequence_id) for r in written(conn) if isinstance(r, Receipt)] == [(1, 0), (1, 1)]
    assert SLOW in broker.loads and 5 not in conn.consumers
    broker.finish_load(SLOW)
    broker.complete_metadata(100)
    answers = [item for item in written(conn) if isinstance(item, pb.BaseCommand)]
    assert answers[-1].type == T.SUCCESS and answers[-1].success.request_id == 2
    consumer, _ = conn.consumers[5]
    assert consumer.permits == 100  # the FLOW that waited was handled after the SUBSCRIBE


def test_commands_about_the_one_being_made_keep_their_order() -> None:
    broker = SimBroker(SimStorage(BrokerConfig(), lambda: 1_000, LedgerConfig()))
    conn = SimConnection(broker, "client-1")
    conn.handle(producer(SLOW, producer_id=2, request_id=1, producer_name="q"))
    conn.send_run([send(2, 0)])
    conn.send_run([send(2, 1)])
    assert written(conn) == []  # nothing about producer 2 before its PRODUCER is answered
    broker.finish_load(SLOW)
    broker.complete_metadata(100)
    broker.write(SLOW)
    broker.sync(SLOW)
    broker.deliver_reports(SLOW)
    assert [(r.producer_id, r.sequence_id) for r in written(conn) if isinstance(r, Receipt)] == [(2, 0), (2, 1)]
    assert not [m for m in written(conn) if isinstance(m, Message)]
