"""Traffic that runs through planned moves of a cluster's bundles and keeps score: producers
sending without pause, Shared and Key_Shared consumers acknowledging, and afterwards what
an application would have seen (errors, losses, duplicates, order per key)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pulsar
from e2e_helpers import quiet_logger, read_topic


@dataclass
class Score:
    """What the application saw; every list is of message indexes."""

    sent: int = 0
    acknowledged: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    #: the longest wait for a receipt, in seconds
    longest_receipt_s: float = 0.0
    #: every index its subscription received, in arrival order, with its key
    received: list[tuple[int, str]] = field(default_factory=list)

    def received_all(self) -> bool:
        return self.acknowledged <= {index for index, _ in self.received}

    def redelivered(self) -> int:
        return len(self.received) - len({index for index, _ in self.received})


class Publisher(threading.Thread):
    """One producer sending at a fixed rate, its receipts counted (dedup on: a resend after
    a move must not store a message twice)."""

    def __init__(self, client: pulsar.Client, topic: str, score: Score, rate: int, keys: int) -> None:
        super().__init__(daemon=True)
        # unbatched: Key_Shared dispatches a batch by one key, so keys need batches of their
        # own, and key-based batches carry sequence ids out of order, which deduplication
        # (by the highest sequence id, as Pulsar's) cannot follow
        self.producer = client.create_producer(topic, producer_name=f"rolling-{topic.rsplit('/', 1)[-1]}",
                                               send_timeout_millis=60_000, block_if_queue_full=True,
                                               batching_enabled=False)
        self.score, self.rate, self.keys = score, rate, keys
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        interval, next_at, index = 1.0 / self.rate, time.monotonic(), 0
        while not self.stopping.is_set():
            sent_at = time.monotonic()
            self.producer.send_async(f"{index}".encode(), self._receipt(index, sent_at),
                                     partition_key=f"k{index % self.keys}")
            index += 1
            self.score.sent = index
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                self.stopping.wait(pause)

    def _receipt(self, index: int, sent_at: float):  # type: ignore[no-untyped-def]
        def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            waited = time.monotonic() - sent_at
            with self._lock:
                self.score.longest_receipt_s = max(self.score.longest_receipt_s, waited)
                if result == pulsar.Result.Ok:
                    self.score.acknowledged.add(index)
                else:
                    self.score.errors.append(f"send {index}: {result}")
        return done

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        self.producer.flush()
        self.producer.close()


class Subscriber(threading.Thread):
    """One consumer of a subscription, acknowledging what it receives."""

    def __init__(self, client: pulsar.Client, topic: str, subscription: str, kind: pulsar.ConsumerType,
                 score: Score) -> None:
        super().__init__(daemon=True)
        self.consumer = client.subscribe(topic, subscription, consumer_type=kind,
                                         initial_position=pulsar.InitialPosition.Earliest)
        self.subscription, self.score = subscription, score
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException as exc:
                self.score.errors.append(f"receive on {self.subscription}: {exc}")
                continue
            self.score.received.append((int(msg.data()), msg.partition_key()))
            try:
                self.consumer.acknowledge(msg)
            except pulsar.PulsarException as exc:
                self.score.errors.append(f"ack on {self.subscription}: {exc}")

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        self.consumer.close()


def first_deliveries_out_of_order(received: list[tuple[int, str]]) -> list[str]:
    """Per key, a message delivered for the first time after a later one of its key was:
    what Key_Shared must never do (a redelivery of an unacknowledged one may come again)."""
    seen: set[int] = set()
    last: dict[str, int] = {}
    wrong = []
    for index, key in received:
        if index in seen:
            continue
        seen.add(index)
        if index < last.get(key, -1):
            wrong.append(f"{key}: {index} after {last[key]}")
        last[key] = max(index, last.get(key, -1))
    return wrong


def stored_duplicates(client: pulsar.Client, topic: str) -> tuple[list[int], set[int]]:
    """Indexes stored more than once on the topic, and every index stored."""
    stored = [int(payload) for payload in read_topic(client, topic)]
    counts: dict[int, int] = defaultdict(int)
    for index in stored:
        counts[index] += 1
    return sorted(i for i, n in counts.items() if n > 1), set(stored)


def client_for(service_urls: list[str]) -> pulsar.Client:
    """A client that knows every broker, as an application in front of a cluster would."""
    hosts = ",".join(url.removeprefix("pulsar://") for url in service_urls)
    return pulsar.Client(f"pulsar://{hosts}", operation_timeout_seconds=30, logger=quiet_logger())
