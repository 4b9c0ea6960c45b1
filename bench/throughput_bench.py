"""Produce / end-to-end throughput and publish latency with the official client.

Starts a real broker (fsync on), then:
1. max-rate phase: N messages of SIZE bytes, batching on, async sends; a consumer on
   the same topic receives them; prints produce and end-to-end msgs/s and MB/s;
2. fixed-rate phase: RATE msgs/s for SECONDS, batching on; prints publish latency
   p50/p99/p999 (send call to receipt callback).

Usage: python bench/throughput_bench.py [--messages 1000000] [--size 100] [--rate 10000] [--seconds 10]
Prints one JSON line per phase.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import pulsar

from magnetar.testing.broker_process import BrokerProcess


def max_rate(client: pulsar.Client, topic: str, n: int, size: int) -> dict[str, float]:
    consumer = client.subscribe(topic, "bench", receiver_queue_size=10000,
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=1, max_pending_messages=50000,
                                      block_if_queue_full=True)
    payload = b"x" * size
    done = threading.Event()
    acked = [0]

    def on_sent(res: pulsar.Result, _mid: object) -> None:
        acked[0] += 1
        if acked[0] == n:
            done.set()

    received = [0]
    recv_done = threading.Event()

    def consume() -> None:
        while received[0] < n:
            msg = consumer.receive(timeout_millis=30000)
            received[0] += 1
            consumer.acknowledge(msg)
        recv_done.set()

    t_consumer = threading.Thread(target=consume, daemon=True)
    start = time.perf_counter()
    t_consumer.start()
    for _ in range(n):
        producer.send_async(payload, on_sent)
    producer.flush()
    done.wait(120)
    produce_s = time.perf_counter() - start
    recv_done.wait(120)
    e2e_s = time.perf_counter() - start
    producer.close()
    consumer.close()
    return {"phase": "max_rate", "messages": n, "size_bytes": size,
            "produce_msgs_per_s": round(n / produce_s), "produce_MB_per_s": round(n * size / produce_s / 1e6, 2),
            "e2e_msgs_per_s": round(received[0] / e2e_s), "e2e_MB_per_s": round(received[0] * size / e2e_s / 1e6, 2)}


def fixed_rate(client: pulsar.Client, topic: str, rate: int, seconds: float, size: int) -> dict[str, float]:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                      max_pending_messages=50000, block_if_queue_full=True)
    payload = b"y" * size
    latencies: list[float] = []
    lock = threading.Lock()

    def sender(sent_at: float):  # type: ignore[no-untyped-def]
        def cb(res: pulsar.Result, _mid: object) -> None:
            with lock:
                latencies.append(time.perf_counter() - sent_at)
        return cb

    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(payload, sender(time.perf_counter()))
    producer.flush()
    producer.close()
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3)

    return {"phase": "fixed_rate", "rate": rate, "messages": len(lat), "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": round(lat[-1] * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data", {"journalSyncData": "true"}) as broker:
        client = pulsar.Client(broker.service_url, io_threads=2)
        print(json.dumps(max_rate(client, "bench-max", args.messages, args.size)), flush=True)
        print(json.dumps(fixed_rate(client, "bench-fixed", args.rate, args.seconds, args.size)), flush=True)
        client.close()


if __name__ == "__main__":
    main()
