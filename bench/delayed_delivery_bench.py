"""Delayed delivery at scale: both trackers side by side in one run.

For each tracker (in-memory, bucket-based), a fresh broker: N delayed messages with
delivery times spread over a window (default one hour) go into one topic with a Shared
subscription connected; then it reports
- broker memory growth (VmRSS after indexing minus before),
- index build time (first send until the tracker holds every message),
- restart-to-first-delivery after kill -9: from the kill until a message published after
  the restart reaches the consumer (the broker must get past the whole delayed backlog),
- delivery lateness p50/p99 for messages coming due (a tail of short delays; negative
  means early, which the default non-strict tick allows by up to one tick).

The window starts ``--start-after-s`` from the first send (default three hours), so no
indexed message comes due while a run of many millions is still loading or restarting.

Usage: python bench/delayed_delivery_bench.py [--messages 1000000] [--window-s 3600]
       [--start-after-s 10800] [--trackers in-memory,bucket]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

from magnetar.testing.broker_process import BrokerProcess

TRACKERS = {
    "in-memory": "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
    "bucket": "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def delayed_count(broker: BrokerProcess, topic: str) -> int:
    url = f"{broker.web_url}/admin/v2/persistent/public/default/{topic}/stats"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            stats = json.load(resp)
        return int(stats["subscriptions"]["s"].get("msgDelayed", 0))
    except (OSError, KeyError, ValueError):
        return -1


def produce(client: pulsar.Client, topic: str, n: int, window_ms: int, start_after_ms: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=20000,
                                      block_if_queue_full=True)
    base = int(time.time() * 1000) + start_after_ms
    done = threading.Semaphore(0)
    for i in range(n):
        producer.send_async(b"d" * 100, lambda r, m: done.release(), deliver_at=base + (i * 7919) % window_ms)
    producer.flush()
    for _ in range(n):
        done.acquire()
    producer.close()


def lateness(client: pulsar.Client, consumer: pulsar.Consumer, topic: str, count: int) -> dict[str, float]:
    producer = client.create_producer(topic, batching_enabled=False)
    due: dict[bytes, float] = {}
    start = time.time() + 2
    for i in range(count):
        at = start + i * 0.01
        key = f"late-{i}".encode()
        due[key] = at
        producer.send(key, deliver_at=int(at * 1000))
    lags = []
    while len(lags) < count:
        msg = consumer.receive(timeout_millis=60_000)
        consumer.acknowledge(msg)
        if msg.data() in due:
            lags.append((time.time() - due[msg.data()]) * 1000)
    lags.sort()
    return {"lateness_p50_ms": round(lags[len(lags) // 2], 1), "lateness_p99_ms": round(lags[int(len(lags) * 0.99)], 1)}


def run(tracker: str, n: int, window_ms: int, start_after_ms: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {
            "delayedDeliveryTrackerFactoryClassName": TRACKERS[tracker],
            "managedLedgerMaxEntriesPerLedger": "50000"}).start()
        assert broker.proc is not None
        client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("delayed", "s", consumer_type=pulsar.ConsumerType.Shared)
        before = rss_bytes(broker.proc.pid)
        t0 = time.monotonic()
        produce(client, "delayed", n, window_ms, start_after_ms)
        while delayed_count(broker, "delayed") not in (n, -1):
            time.sleep(0.2)
        build_s = time.monotonic() - t0
        growth = rss_bytes(broker.proc.pid) - before
        late = lateness(client, consumer, "delayed", 200)
        client.close()
        time.sleep(1.5)  # let the cursor (and the bucket list in its properties) be persisted
        broker.kill()
        t1 = time.monotonic()
        broker.start(timeout_s=600)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=600,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("delayed", "s", consumer_type=pulsar.ConsumerType.Shared)
        client.create_producer("delayed").send(b"first")
        # the in-memory tracker re-reads the whole backlog first: allow it the time that takes
        msg = consumer.receive(timeout_millis=3_600_000)
        restart_s = time.monotonic() - t1
        client.close()
        broker.kill()
        return {"tracker": tracker, "messages": n, "rss_growth_MB": round(growth / 1e6, 1),
                "index_build_s": round(build_s, 1), "restart_to_first_delivery_s": round(restart_s, 2),
                "first_after_restart": msg.data().decode(), **late}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--window-s", type=int, default=3600)
    parser.add_argument("--start-after-s", type=int, default=10_800,
                        help="delay before the window of delivery times opens")
    parser.add_argument("--trackers", default="in-memory,bucket")
    args = parser.parse_args()
    for tracker in args.trackers.split(","):
        print(json.dumps(run(tracker, args.messages, args.window_s * 1000, args.start_after_s * 1000)), flush=True)


if __name__ == "__main__":
    main()
