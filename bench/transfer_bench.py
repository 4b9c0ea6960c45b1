"""A bundle moved between brokers under load, as an application sees it.

A ZooKeeper and two ``magnetar broker`` processes; one topic with deduplication, one producer
publishing at ``--rate`` msgs/s through the official client (batching, 1 ms) and one Shared
consumer acknowledging each message. Every ``--every`` seconds the topic's bundle is unloaded
on its owner (``PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/unload``) and goes to whichever
broker the next lookup places it on. Printed: errors raised to the application, the longest
send-to-receipt latency (overall and within 2 s after each move), messages acknowledged but
not stored, stored twice, and redelivered to the consumer.

    python bench/transfer_bench.py --rate 10000 --moves 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pulsar  # noqa: E402

from magnetar.core.cluster.namespace_bundles import NamespaceBundles  # noqa: E402
from magnetar.core.names import TopicName  # noqa: E402
from magnetar.storage.zookeeper.store import ZooKeeperMetadataStore  # noqa: E402
from magnetar.testing.broker_process import BrokerProcess  # noqa: E402
from magnetar.testing.zookeeper_process import ZooKeeperProcess  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Load:
    def __init__(self, client: pulsar.Client, topic: str, rate: int) -> None:
        self.producer = client.create_producer(topic, producer_name="transfer-bench", send_timeout_millis=30_000,
                                               block_if_queue_full=True, batching_enabled=True,
                                               batching_max_publish_delay_ms=1, max_pending_messages=50_000)
        self.consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared,
                                         receiver_queue_size=5000)
        self.rate = rate
        self.sent_at: list[float] = []
        self.latency: dict[int, tuple[float, float]] = {}  # index -> (sent, receipt latency)
        self.errors: list[str] = []
        self.received: list[int] = []
        self.stopping = threading.Event()
        self.flushed = threading.Event()  # every send has its receipt or error
        self.lock = threading.Lock()
        self.longest_gap = 0.0
        self.gave_up_at = 0.0
        #: acknowledged and not yet received, from when every send was answered
        self.outstanding: set[int] | None = None
        self.started = time.monotonic()

    def done_consuming(self) -> bool:
        """Once every send is answered: when all acknowledged messages are received, or 60 s
        on. What is still to come is worked out once and then shrinks with each message, so
        that checking costs nothing per message (a set of every acknowledged index built per
        message would slow the consumer to a few dozen messages a second)."""
        if not self.flushed.is_set():
            return False
        if self.outstanding is None:
            with self.lock:
                self.outstanding = set(self.latency) - set(self.received)
            self.gave_up_at = time.monotonic() + 60
        return not self.outstanding or time.monotonic() > self.gave_up_at

    def publish(self) -> None:
        index, start = 0, time.monotonic()
        self.started = start
        while not self.stopping.is_set():
            due = start + index / self.rate
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.001))
                continue
            self.producer.send_async(str(index).encode(), self._receipt(index, now))
            index += 1
        self.sent = index

    def _receipt(self, index: int, sent: float):  # type: ignore[no-untyped-def]
        def done(result: pulsar.Result, _: pulsar.MessageId) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.latency[index] = (sent, time.monotonic() - sent)
                else:
                    self.errors.append(f"{index}: {result}")
        return done

    def consume(self) -> None:
        """Until everything acknowledged is received, or 60 s after the producer stopped;
        notes the longest wait for a message while the backlog was not empty."""
        last = time.monotonic()
        while not self.done_consuming():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException as exc:
                self.errors.append(f"receive: {exc}")
                continue
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
            index = int(msg.data())
            self.received.append(index)
            if self.outstanding is not None:
                self.outstanding.discard(index)
            try:
                self.consumer.acknowledge(msg)
            except pulsar.PulsarException as exc:
                self.errors.append(f"ack of {int(msg.data())}: {exc}")


def owner_web_url(metadata_url: str, topic: str) -> tuple[str, str]:
    name = TopicName.parse(topic)
    bundle = NamespaceBundles(name.namespace_name).find_bundle(str(name))
    deadline = time.monotonic() + 30
    with ZooKeeperMetadataStore(metadata_url) as store:
        # between owners while its clients are on their way to the next one
        while (node := store.get_bundle_owner(bundle.namespace, bundle.range_name)) is None:
            assert time.monotonic() < deadline, "the topic's bundle found no owner within 30 s"
            time.sleep(0.05)
    return str(node.data["httpUrl"]), bundle.range_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--moves", type=int, default=5)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--drain-ms", type=int, default=3000, help="unloadDrainTimeoutMillis")
    parser.add_argument("--data-dir", help="keep the brokers' data here (default: a temporary directory)")
    parser.add_argument("--client-log", help="the official client's log (info level) goes to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, ZooKeeperProcess() as zookeeper:
        tmp = args.data_dir or scratch
        zookeeper.start()
        url = zookeeper.url("/bench")
        subprocess.run([sys.executable, "-m", "magnetar.cli", "initialize-cluster-metadata", "--cluster", "bench",
                        "--metadata-store", url], check=True, capture_output=True, timeout=60)
        settings = {"metadataStoreUrl": url, "clusterName": "bench", "metadataStoreSessionTimeoutMillis": "5000",
                    "brokerDeduplicationEnabled": "true", "unloadDrainTimeoutMillis": str(args.drain_ms),
                    # everything kept, so that what was stored can be read back at the end
                    "defaultRetentionTimeInMinutes": "-1", "defaultRetentionSizeInMB": "-1"}
        brokers = [BrokerProcess(Path(tmp) / "data", settings, subcommand="broker").start() for _ in range(2)]
        hosts = ",".join(b.service_url.removeprefix("pulsar://") for b in brokers)
        client = pulsar.Client(f"pulsar://{hosts}", operation_timeout_seconds=30,
                               logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, args.client_log) if args.client_log
                               else pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        topic = f"persistent://public/default/transfer-{uuid.uuid4().hex[:8]}"
        load = Load(client, topic, args.rate)
        workers = [threading.Thread(target=load.publish), threading.Thread(target=load.consume)]
        try:
            for worker in workers:
                worker.start()
            time.sleep(args.every)
            moves = []
            for _ in range(args.moves):
                web, bundle = owner_web_url(url, topic)
                moves.append(time.monotonic())
                request = urllib.request.Request(f"{web}/admin/v2/namespaces/public/default/{bundle}/unload",
                                                 method="PUT")
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert answer.status in (200, 204)
                time.sleep(args.every)
            load.stopping.set()
            workers[0].join()
            load.producer.flush()
            load.flushed.set()
            workers[1].join()
            if set(load.latency) - set(load.received):
                web, _ = owner_web_url(url, topic)
                path = topic.replace("persistent://", "/admin/v2/persistent/")
                with urllib.request.urlopen(f"{web}{path}/stats", timeout=10) as answer:
                    sub = json.load(answer)["subscriptions"]["bench"]
                print(f"the consumer is behind: backlog {sub['msgBacklog']}, unacked {sub['unackedMessages']}, "
                      f"consumers {[(c['consumerName'], c['availablePermits']) for c in sub['consumers']]}")
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            stored: list[int] = []
            while reader.has_message_available():
                stored.append(int(reader.read_next(timeout_millis=5000).data()))
            report(load, moves, stored)
        finally:
            client.close()
            for broker in brokers:
                broker.stop()


def report(load: Load, moves: list[float], stored: list[int]) -> None:
    latencies = [lat for _, lat in load.latency.values()]
    near_moves = [lat for sent, lat in load.latency.values() if any(0 <= sent - m <= 2.0 for m in moves)]
    acknowledged = set(load.latency)
    print(f"rate {load.rate} msgs/s, {len(moves)} moves, {load.sent} sent, {len(acknowledged)} acknowledged")
    print(f"errors raised to the application: {len(load.errors)} {load.errors[:3]}")
    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1000:.1f} ms"
    print(f"send to receipt: p50 {ms(latencies, 0.5)}, p99 {ms(latencies, 0.99)}, p99.9 {ms(latencies, 0.999)}, "
          f"max {ms(latencies, 1.0)}; within 2 s after a move: p99 {ms(near_moves, 0.99)}, max {ms(near_moves, 1.0)}")
    print(f"the consumer's longest wait for a message: {load.longest_gap * 1000:.0f} ms")
    print(f"acknowledged but not stored: {len(acknowledged - set(stored))}; stored twice: "
          f"{len(stored) - len(set(stored))}; redelivered to the consumer: "
          f"{len(load.received) - len(set(load.received))}; acknowledged and never received: "
          f"{len(acknowledged - set(load.received))}")
    missing = sorted(acknowledged - set(load.received))
    if missing:
        sent_at = {index: sent for index, (sent, _) in load.latency.items()}
        ranges, start = [], missing[0]
        for previous, index in zip(missing, missing[1:] + [None], strict=True):
            if index != previous + 1:
                ranges.append(f"{start}-{previous}")
                start = index if index is not None else start
        print(f"never received: {len(ranges)} runs {ranges[:8]}; sent {sent_at[missing[0]] - load.started:.2f} to "
              f"{sent_at[missing[-1]] - load.started:.2f} s after the start; moves at "
              f"{[round(m - load.started, 2) for m in moves]} s")


if __name__ == "__main__":
    main()
