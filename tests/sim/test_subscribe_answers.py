"""A SUBSCRIBE is answered once its subscription is durable; what a second SUBSCRIBE of the
same consumer id gets meanwhile, and what a late answer gets when its consumer is gone.

The official clients clear their receive queue and grant their permits anew on each
SUCCESS of a SUBSCRIBE. A second SUCCESS while the first is still to come would make the
client throw away what the broker dispatched between the two, which stays unacknowledged
on the broker for ever (a consumer that stalls). Pulsar answers such a second SUBSCRIBE
with ServiceNotReady ("Consumer is already present on the connection"), and so does this
broker; once the first is answered, a repeat is answered SUCCESS at once.
"""

from __future__ import annotations

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import ServerError
from magnetar.storage.interfaces import LedgerConfig
from magnetar.testing.raw_client import subscribe
from magnetar.testing.sim.command_shell_twin import SimBroker, SimStorage
from magnetar.testing.sim.sim_connection import SimConnection
from magnetar.wire import pulsar_api_pb2 as pb

T = pb.BaseCommand
TOPIC = "persistent://public/default/answers"


def connected() -> tuple[SimBroker, SimConnection]:
    broker = SimBroker(SimStorage(BrokerConfig(), lambda: 1_000, LedgerConfig()))
    return broker, SimConnection(broker, "client-1")


def answers(conn: SimConnection) -> list[tuple[str, int, int | None]]:
    """(command, request id, error code) of what the broker wrote back, in order."""
    seen = []
    for _, item in conn.written:
        if isinstance(item, pb.BaseCommand) and item.type == T.SUCCESS:
            seen.append(("SUCCESS", item.success.request_id, None))
        elif isinstance(item, pb.BaseCommand) and item.type == T.ERROR:
            seen.append(("ERROR", item.error.request_id, item.error.error))
        elif isinstance(item, pb.BaseCommand) and item.type == T.CLOSE_CONSUMER:
            seen.append(("CLOSE_CONSUMER", item.close_consumer.consumer_id, None))
    return seen


def subscribed_unanswered(broker: SimBroker, conn: SimConnection) -> None:
    conn.handle(subscribe(TOPIC, "s", consumer_id=7, request_id=1, subType=pb.CommandSubscribe.Shared))
    broker.finish_load(TOPIC)
    assert 7 in conn.consumers and answers(conn) == []  # attached; SUCCESS waits for the cursor write


def test_a_second_subscribe_while_the_first_is_unanswered_is_told_to_retry() -> None:
    broker, conn = connected()
    subscribed_unanswered(broker, conn)
    conn.handle(subscribe(TOPIC, "s", consumer_id=7, request_id=2, subType=pb.CommandSubscribe.Shared))
    assert answers(conn) == [("ERROR", 2, ServerError.ServiceNotReady)]
    broker.complete_metadata(100)
    assert answers(conn)[1:] == [("SUCCESS", 1, None)]
    conn.handle(subscribe(TOPIC, "s", consumer_id=7, request_id=3, subType=pb.CommandSubscribe.Shared))
    assert answers(conn)[2:] == [("SUCCESS", 3, None)]  # answered: a repeat succeeds at once
    assert len(conn.consumers[7][1].consumers) == 1


def test_a_late_answer_for_a_consumer_the_broker_closed_is_an_error() -> None:
    broker, conn = connected()
    subscribed_unanswered(broker, conn)
    broker.unload(broker.topics[TOPIC])
    broker.complete_metadata(100)
    assert answers(conn) == [("CLOSE_CONSUMER", 7, None), ("ERROR", 1, ServerError.ServiceNotReady)]
    assert conn.subscribing == {}


def test_a_failed_write_settles_the_answer_too() -> None:
    broker, conn = connected()
    subscribed_unanswered(broker, conn)
    broker.metadata_queue.popleft().complete(OSError("disk gone"))
    assert answers(conn) == [("ERROR", 1, ServerError.MetadataError)]
    conn.handle(subscribe(TOPIC, "s", consumer_id=7, request_id=2, subType=pb.CommandSubscribe.Shared))
    assert answers(conn)[1:] == [("SUCCESS", 2, None)]
