"""Topic loads on the binary protocol: the ledger is opened on a worker thread (its recovery
reads and syncs files), so the event loop keeps serving other clients meanwhile; the loading
connection's later commands wait and are handled in the order they came.

The broker runs in this process over real files; the test holds a ledger's opening on its
worker thread to look at the broker while the load is under way."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.errors import ServiceNotReady
from magnetar.core.names import TopicName
from magnetar.server.broker_service import BrokerService
from magnetar.server.connection import ServerConnection
from magnetar.storage.segment_ledger import SegmentLedger, SegmentLedgerFactory
from magnetar.testing.memory_transport import MemoryTransport
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import FrameDecoder, encode_command

T = pb.BaseCommand
WAIT_S = 10.0


class RecordingTransport(MemoryTransport):
    """Decodes what the broker writes to the connection."""

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port))
        self.decoder = FrameDecoder(5 * 1024 * 1024 + 10240)
        self.commands: list[pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        self.commands.extend(frame.command for frame in self.decoder.feed(data))


class Client:
    def __init__(self, broker: BrokerService, port: int) -> None:
        self.transport = RecordingTransport(port)
        self.conn = ServerConnection(broker)
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version, cmd.connect.protocol_version = "topic-loading-test", 21
        self.send(cmd)

    def send(self, cmd: pb.BaseCommand) -> None:
        self.conn.data_received(encode_command(cmd))

    def producer(self, topic: str, producer_id: int, request_id: int) -> None:
        cmd = T(type=T.PRODUCER)
        cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = topic, producer_id, request_id
        self.send(cmd)

    def answer(self, request_id: int) -> pb.BaseCommand | None:
        for cmd in self.transport.commands:
            for field in ("producer_success", "success", "error"):
                if cmd.HasField(field) and getattr(cmd, field).request_id == request_id:
                    return cmd
        return None


async def until(condition: Callable[[], Any], what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not (found := condition()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)
    return found


class HeldOpening:
    """Holds the opening of one topic's ledger on its worker thread until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, held: str) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []
        real_open = SegmentLedgerFactory.open

        def open_held(factory: SegmentLedgerFactory, name: str, first_ledger_id: int | None = None) -> SegmentLedger:
            self.threads.append(threading.current_thread().name)
            if held in name:
                self.started.set()
                assert self.release.wait(WAIT_S)
            return real_open(factory, name, first_ledger_id)

        monkeypatch.setattr(SegmentLedgerFactory, "open", open_held)


def with_broker(tmp_path: Path, scenario: Callable[[BrokerService], Awaitable[None]],
                **settings: Any) -> None:
    async def run() -> None:
        config = BrokerConfig(brokerServicePort=0, webServicePort=0, **settings)
        broker = BrokerService(config, tmp_path / "data")
        broker.start(asyncio.get_running_loop())
        try:
            await scenario(broker)
        finally:
            await broker.close()
    asyncio.run(run())
    gc.collect()  # the broker's cycles hold descriptors: freed here, not in a later test that counts them


def test_the_loop_serves_other_clients_while_a_ledger_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_broker(tmp_path, lambda broker: serves_others(broker, HeldOpening(monkeypatch, "slow")))


async def serves_others(broker: BrokerService, held: HeldOpening) -> None:
    other = Client(broker, 2)
    other.producer("persistent://public/default/ready", 1, 1)
    assert (await until(lambda: other.answer(1), "the first topic's producer")).HasField("producer_success")
    loading = Client(broker, 1)
    loading.producer("persistent://public/default/slow", 1, 10)
    await until(held.started.is_set, "the slow ledger to start opening")
    assert held.threads[-1] != threading.current_thread().name, "opened on the event loop"
    assert loading.answer(10) is None
    other.producer("persistent://public/default/ready-too", 2, 2)  # served while the other load waits
    assert (await until(lambda: other.answer(2), "a producer on another topic")).HasField("producer_success")
    loading.producer("persistent://public/default/slow", 1, 11)  # asked for again: waits its turn
    await asyncio.sleep(0.01)
    assert loading.answer(11) is None
    held.release.set()
    first = await until(lambda: loading.answer(10), "the slow topic's producer")
    again = await until(lambda: loading.answer(11), "the repeated request's answer")
    # the first answers once the new topic's record is durable, so it may come second
    assert first.producer_success.producer_name == again.producer_success.producer_name != ""
    assert "persistent://public/default/slow" in broker.topics
    assert 1 in loading.conn.producers


def test_a_producer_closed_while_its_topic_loads_is_closed_after_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with_broker(tmp_path, lambda broker: closed_while_loading(broker, HeldOpening(monkeypatch, "slow")))


async def closed_while_loading(broker: BrokerService, held: HeldOpening) -> None:
    client = Client(broker, 1)
    client.producer("persistent://public/default/slow", 1, 10)
    await until(held.started.is_set, "the slow ledger to start opening")
    close = T(type=T.CLOSE_PRODUCER)
    close.close_producer.producer_id, close.close_producer.request_id = 1, 11
    client.send(close)
    await asyncio.sleep(0.01)
    assert client.answer(11) is None, "the close waits for the load, behind the PRODUCER"
    held.release.set()
    assert (await until(lambda: client.answer(11), "the close's answer")).HasField("success")
    assert (await until(lambda: client.answer(10), "the producer's answer")).HasField("producer_success")
    topic = broker.topics["persistent://public/default/slow"]
    assert 1 not in client.conn.producers and not topic.producers


def test_admin_paths_refuse_a_topic_being_loaded_until_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_broker(tmp_path, lambda broker: admin_while_loading(broker, HeldOpening(monkeypatch, "slow")))


async def admin_while_loading(broker: BrokerService, held: HeldOpening) -> None:
    client = Client(broker, 1)
    client.producer("persistent://public/default/slow", 1, 10)
    await until(held.started.is_set, "the slow ledger to start opening")
    with pytest.raises(ServiceNotReady, match="being loaded"):
        broker.get_topic(TopicName.parse("persistent://public/default/slow"), create=False)
    held.release.set()
    assert (await until(lambda: client.answer(10), "the producer")).HasField("producer_success")
    assert broker.get_topic(TopicName.parse("persistent://public/default/slow"), create=False) \
        is broker.topics["persistent://public/default/slow"]


def test_loads_beyond_max_concurrent_topic_load_request_wait_their_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_broker(tmp_path, lambda broker: one_load_at_a_time(broker, HeldOpening(monkeypatch, "slow")),
                maxConcurrentTopicLoadRequest=1)


async def one_load_at_a_time(broker: BrokerService, held: HeldOpening) -> None:
    first, second = Client(broker, 1), Client(broker, 2)
    first.producer("persistent://public/default/slow", 1, 10)
    await until(held.started.is_set, "the slow ledger to start opening")
    second.producer("persistent://public/default/queued", 1, 20)
    await asyncio.sleep(0.05)
    assert len(held.threads) == 1, "the second load started while the first held the only slot"
    assert second.answer(20) is None
    held.release.set()
    assert (await until(lambda: second.answer(20), "the queued load")).HasField("producer_success")
    assert (await until(lambda: first.answer(10), "the first load")).HasField("producer_success")
    assert len(held.threads) == 2


def test_a_non_persistent_topic_takes_its_ledger_ids_on_the_event_loop(tmp_path: Path) -> None:
    """Ledger ids are handed out on the loop only; an in-memory topic has no files to wait for."""
    with_broker(tmp_path, in_memory_load)


async def in_memory_load(broker: BrokerService) -> None:
    threads: list[str] = []
    take = broker.ledger_ids.next_id

    def recorded() -> int:
        threads.append(threading.current_thread().name)
        return take()

    broker.ledger_ids.next_id = recorded  # type: ignore[method-assign]
    client = Client(broker, 1)
    client.producer("non-persistent://public/default/memory", 1, 10)
    assert (await until(lambda: client.answer(10), "the producer")).HasField("producer_success")
    assert threads and set(threads) == {threading.current_thread().name}


class OwnedBundles:
    """A cluster's say on which topics this broker serves: only ``serves`` is asked on a load."""

    def __init__(self) -> None:
        self.owned = True

    def serves(self, name: TopicName) -> bool:
        return self.owned


def test_a_topic_whose_bundle_is_handed_over_while_it_loads_is_not_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-over lists the loaded topics to close; one still loading then is not among
    them, and serving it afterwards would make a second writer beside the next owner."""
    with_broker(tmp_path, lambda broker: handed_over_while_loading(broker, HeldOpening(monkeypatch, "slow")))


async def handed_over_while_loading(broker: BrokerService, held: HeldOpening) -> None:
    owners = OwnedBundles()
    broker.cluster = owners  # type: ignore[assignment]
    client = Client(broker, 1)
    client.producer("persistent://public/default/slow", 1, 10)
    await until(held.started.is_set, "the slow ledger to start opening")
    owners.owned = False
    held.release.set()
    answer = await until(lambda: client.answer(10), "the producer's answer")
    assert answer.HasField("error") and answer.error.error == pb.ServiceNotReady
    assert "redo the lookup" in answer.error.message
    assert "persistent://public/default/slow" not in broker.topics and 1 not in client.conn.producers
    owners.owned = True  # the bundle comes back: the topic loads again, from its files
    client.producer("persistent://public/default/slow", 1, 11)
    assert (await until(lambda: client.answer(11), "the second producer")).HasField("producer_success")


def test_a_topic_released_between_its_load_and_the_answer_is_not_attached_to(tmp_path: Path) -> None:
    """A hand-over that lists the topics just after a load finished closes the topic before
    the waiting PRODUCER is answered: it is refused, not attached to the released topic."""
    with_broker(tmp_path, released_before_answer)


async def released_before_answer(broker: BrokerService) -> None:
    load = broker.load_topic

    async def load_then_release(name: TopicName, create: bool) -> Any:
        topic = await load(name, create)
        broker.topics.pop(str(name))  # what a release does to the loaded topics, at the worst moment
        return topic

    broker.load_topic = load_then_release  # type: ignore[method-assign]
    client = Client(broker, 1)
    client.producer("persistent://public/default/released", 1, 10)
    answer = await until(lambda: client.answer(10), "the producer's answer")
    assert answer.HasField("error") and answer.error.error == pb.ServiceNotReady, answer
    assert 1 not in client.conn.producers
