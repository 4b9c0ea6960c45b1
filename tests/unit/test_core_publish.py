"""The publish path in core: deduplication verdicts, business ids, the delay bound, and
what a failed append leaves behind."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from magnetar.core.broker.broker_config import BrokerConfig
from magnetar.core.dedup.message_deduplication import MessageDeduplication
from magnetar.core.dedup.property_dedup_window import PropertyDedupWindow
from magnetar.core.errors import NotAllowed, PersistenceError, ServiceNotReady
from magnetar.core.names import TopicName
from magnetar.core.positions import Position
from magnetar.core.topics import publish
from magnetar.core.topics.producer import Producer
from magnetar.core.topics.topic import Topic
from magnetar.storage.interfaces import LedgerConfig
from magnetar.storage.memory_ledger import MemoryLedger
from magnetar.wire import pulsar_api_pb2 as pb
from magnetar.wire.frames import make_entry

DUPLICATE = Position(-1, -1)


@dataclass
class ProducerSink:
    receipts: list[tuple[int, Position]] = field(default_factory=list)
    errors: list[tuple[int, int]] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)

    def send_receipt(self, producer_id: int, sequence_id: int, highest: int, pos: Position) -> None:
        self.receipts.append((sequence_id, pos))

    def send_receipts(self, producer_id: int, receipts: Sequence[tuple[int, int, Position]]) -> None:
        self.receipts += ((sequence_id, pos) for sequence_id, _, pos in receipts)

    def send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        self.errors.append((sequence_id, code))

    def close_producer(self, producer_id: int) -> None:
        self.closed.append(producer_id)

    def producer_ready(self, producer: Producer) -> None: ...


def setup(dedup: bool = False, window: bool = False) -> tuple[Topic, Producer, ProducerSink]:
    topic = Topic(TopicName.parse("persistent://public/default/pub"), MemoryLedger("pub", config=LedgerConfig()),
                  BrokerConfig())
    if dedup:
        topic.dedup = MessageDeduplication()
        topic.dedup.set_enabled(True)
        topic.dedup.begin_recovery({})
        topic.dedup.finish_recovery(0)
    if window:
        topic.property_dedup = PropertyDedupWindow(60_000, 100, "__dedup_id")
    sink = ProducerSink()
    producer = Producer(1, "p", sink)
    topic.add_producer(producer)
    return topic, producer, sink


def send(topic: Topic, producer: Producer, seq: int, **meta: object) -> Position | None:
    properties = [pb.KeyValue(key=k, value=str(v)) for k, v in dict(meta.pop("props", {})).items()]  # type: ignore[call-overload]
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000, properties=properties,
                                  **meta)  # type: ignore[arg-type]
    entry = make_entry(metadata, b"payload")
    _, positions = publish.publish(topic, producer, [(seq, seq, 1, entry)], 1000)
    return positions[0] if positions else None


def persist_all(topic: Topic) -> None:
    last = topic.ledger.last_position()
    assert last is not None
    topic.on_persisted(last, 1000)


def test_a_resent_sequence_id_is_a_duplicate_once_stored_and_a_retry_while_in_flight() -> None:
    topic, producer, sink = setup(dedup=True)
    first = send(topic, producer, 0)
    assert first is not None
    with pytest.raises(PersistenceError, match="duplicate"):
        send(topic, producer, 0)  # in flight: it may yet fail, so it cannot be judged
    persist_all(topic)
    assert send(topic, producer, 0) is None
    assert sink.receipts == [(0, first), (0, DUPLICATE)]
    assert topic.ledger.last_position() == first


def test_without_deduplication_every_send_is_stored() -> None:
    topic, producer, _ = setup()
    assert send(topic, producer, 0) != send(topic, producer, 0)


def test_a_business_id_seen_in_the_window_is_a_duplicate_and_one_in_flight_is_retried() -> None:
    topic, producer, sink = setup(window=True)
    assert send(topic, producer, 0, props={"__dedup_id": "order-1"}) is not None
    with pytest.raises(PersistenceError, match="being stored"):
        send(topic, producer, 1, props={"__dedup_id": "order-1"})
    persist_all(topic)
    assert send(topic, producer, 2, props={"__dedup_id": "order-1"}) is None
    assert sink.receipts[-1] == (2, DUPLICATE)
    assert send(topic, producer, 3, props={"__dedup_id": "order-2"}) is not None


def test_a_delay_beyond_the_limit_is_refused_and_none_when_unlimited() -> None:
    late = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1000, deliver_at_time=1000 + 5001)
    refused = publish.delay_problem(5000, late)
    assert refused is not None and "5000 milliseconds" in refused.message
    assert publish.delay_problem(0, late) is None
    assert publish.delay_problem(6000, late) is None


def test_taken_back_appends_fail_their_receipts_and_are_forgotten_by_deduplication() -> None:
    topic, producer, sink = setup(dedup=True, window=True)
    kept = send(topic, producer, 0)
    persist_all(topic)
    lost = send(topic, producer, 1, props={"__dedup_id": "order-9"})
    assert lost is not None and kept is not None
    topic.appends_taken_back(lost, "disk full")
    assert sink.errors == [(1, 2)]  # PersistenceError: the client retries
    # the retry (after the reconnect a failed write asks for) is stored, not judged a
    # duplicate, by either kind of deduplication
    producer = reconnect(topic, sink)
    again = send(topic, producer, 1, props={"__dedup_id": "order-9"})
    assert again is not None  # (the memory twin does not take entries back; a segment ledger would)
    persist_all(topic)
    assert sink.receipts[-1] == (1, again)


def reconnect(topic: Topic, sink: ProducerSink) -> Producer:
    producer = Producer(2, "p", sink)
    topic.add_producer(producer)
    return producer


def test_a_failed_write_disconnects_the_producers_so_nothing_they_sent_later_is_stored_first() -> None:
    """Regression (found by the broker-wide simulation): message 1 of a producer, sent before
    the client learnt that message 0 was taken back, was stored; the resend of 0 was then a
    duplicate for deduplication, receipted and never stored. As in Pulsar, a failed write
    disconnects the topic's producers, and what the shell still holds of theirs is refused."""
    topic, producer, sink = setup(dedup=True)
    other_sink = ProducerSink()
    other = Producer(3, "q", other_sink)
    topic.add_producer(other)
    lost = send(topic, producer, 0)
    assert lost is not None
    topic.appends_taken_back(lost, "disk full")
    assert sink.errors == [(0, 2)] and sink.closed == [1] and other_sink.closed == [3]
    assert producer.closed and other.closed and not topic.producers
    with pytest.raises(NotAllowed):
        send(topic, producer, 1)  # in the same read as 0: refused before deduplication sees it
    producer = reconnect(topic, sink)
    first, second = send(topic, producer, 0), send(topic, producer, 1)
    persist_all(topic)
    assert first is not None and second is not None and first < second
    assert sink.receipts == [(0, first), (1, second)]


def test_no_producer_is_added_while_deduplication_waits_for_the_writes_in_flight() -> None:
    """Regression (found by the broker-wide simulation): after a failed write, deduplication
    cannot judge sends until the writes in flight settle; a producer reconnected meanwhile
    had its resends refused and a later send stored once the fence lifted, which made the
    resends duplicates. As Pulsar does with a fenced topic, producers wait."""
    topic, producer, sink = setup(dedup=True)
    other = Producer(3, "q", ProducerSink())
    topic.add_producer(other)
    in_flight = send(topic, other, 0)
    lost = send(topic, producer, 0)
    assert in_flight is not None and lost is not None
    topic.appends_taken_back(lost, "disk full")
    with pytest.raises(ServiceNotReady):
        reconnect(topic, sink)
    topic.on_persisted(in_flight, 1000)  # the write in flight settles: the fence lifts
    producer = reconnect(topic, sink)
    again = send(topic, producer, 0)
    persist_all(topic)
    assert again is not None and sink.receipts == [(0, again)]
