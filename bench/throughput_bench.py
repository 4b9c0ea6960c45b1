"""Produce / end-to-end throughput and publish latency with the official client.

Starts a real broker (fsync on), then:
1. max-rate phase: N messages of SIZE bytes, batching on, async sends; a consumer on
   the same topic receives them; prints produce and end-to-end msgs/s and MB/s;
2. fixed-rate phase: RATE msgs/s for SECONDS, batching on; prints publish latency
   p50/p99/p999 (send call to receipt callback).

Usage: python bench/throughput_bench.py [--messages 1000000] [--size 100] [--rate 10000] [--seconds 10]
       [--tls]  (both phases over pulsar:// and then over pulsar+ssl:// on the same broker)
Prints one JSON line per phase.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pulsar

from magnetar.testing.broker_process import BrokerProcess, free_port


def _client(service_url: str, trust: str | None) -> pulsar.Client:
    return pulsar.Client(service_url, io_threads=1, tls_trust_certs_file_path=trust,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def _produce(service_url: str, trust: str | None, topic: str, n: int, size: int, out: Any, delay_ms: int) -> None:
    client = _client(service_url, trust)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=delay_ms, max_pending_messages=50000,
                                      block_if_queue_full=True)
    payload = b"x" * size
    done = threading.Semaphore(0)
    start = time.perf_counter()
    # Receipts come in order, so one callback per thousand messages tells progress; a Python
    # callback on every message would make the client take the GIL per receipt and cap the rate.
    for i in range(n):
        producer.send_async(payload, (lambda r, m: done.release()) if i % 1000 == 999 or i == n - 1 else None)
    producer.flush()
    for _ in range(n // 1000 + (1 if n % 1000 else 0)):
        done.acquire()
    out.put(("produced", n, time.perf_counter() - start, time.time()))
    client.close()


def _consume(service_url: str, trust: str | None, topic: str, n: int, out: Any) -> None:
    client = _client(service_url, trust)
    consumer = client.subscribe(topic, "bench", receiver_queue_size=20000,
                                initial_position=pulsar.InitialPosition.Earliest,
                                batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(10000, -1, 50))
    out.put(("ready", 0, 0.0, time.time()))
    got = 0
    first = 0.0
    while got < n:
        batch = consumer.batch_receive()
        if not len(batch):
            continue
        if got == 0:
            first = time.time()
        got += len(batch)
        consumer.acknowledge_cumulative(batch[len(batch) - 1])
    out.put(("consumed", got, time.time() - first, time.time()))
    client.close()


def max_rate(service_url: str, topic: str, n: int, size: int, producers: int,
             delay_ms: int = 10, trust: str | None = None) -> dict[str, Any]:
    """Producers and the consumer in their own processes: the client's per-message Python cost
    would otherwise share one GIL and cap the figure below what the broker sustains."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    consumer = ctx.Process(target=_consume, args=(service_url, trust, topic, n * producers, out))
    consumer.start()
    assert out.get(timeout=60)[0] == "ready"
    start = time.time()
    procs = [ctx.Process(target=_produce, args=(service_url, trust, topic, n, size, out, delay_ms))
             for _ in range(producers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=600) for _ in range(producers + 1)]
    for proc in procs + [consumer]:
        proc.join(60)
    produced_end = max(r[3] for r in results if r[0] == "produced")
    consumed_end = next(r[3] for r in results if r[0] == "consumed")
    total = n * producers
    produce_s = produced_end - start
    e2e_s = consumed_end - start
    return {"phase": "max_rate", "url": service_url.split(":")[0], "messages": total, "producers": producers,
            "size_bytes": size,
            "batching_max_publish_delay_ms": delay_ms,
            "produce_msgs_per_s": round(total / produce_s),
            "produce_MB_per_s": round(total * size / produce_s / 1e6, 2),
            "e2e_msgs_per_s": round(total / e2e_s), "e2e_MB_per_s": round(total * size / e2e_s / 1e6, 2)}


def fixed_rate(client: pulsar.Client, topic: str, rate: int, seconds: float, size: int) -> dict[str, float]:
    """Publish latency at ``rate``: sends go out in one burst per millisecond (the producer's
    batching delay), so the sending thread sleeps once per tick rather than once per message
    and the client's I/O thread gets the GIL for receipts without waiting a switch interval."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                      max_pending_messages=50000, block_if_queue_full=True)
    payload = b"y" * size
    latencies: list[float] = []

    def sender(sent_at: float):  # type: ignore[no-untyped-def]
        def cb(res: pulsar.Result, _mid: object) -> None:
            latencies.append(time.perf_counter() - sent_at)
        return cb

    total = int(rate * seconds)
    per_tick = max(1, rate // 1000)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    try:
        start = time.perf_counter()
        for i in range(0, total, per_tick):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            for _ in range(min(per_tick, total - i)):
                producer.send_async(payload, sender(time.perf_counter()))
        producer.flush()
        producer.close()
    finally:
        sys.setswitchinterval(switch_interval)
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
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--batch-delay-ms", type=int, default=10,
                        help="batching_max_publish_delay_ms of the max-rate producers (the client's default)")
    parser.add_argument("--tls", action="store_true", help="also run both phases over pulsar+ssl://")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"journalSyncData": "true"}
        runs: list[tuple[str, str | None]] = [("plain", None)]
        if args.tls:
            from magnetar.testing.tls_certs import make_pki
            pki = make_pki(Path(tmp))
            settings |= {"brokerServicePortTls": str(free_port()), "tlsCertificateFilePath": str(pki.server_cert),
                         "tlsKeyFilePath": str(pki.server_key)}
            runs.append(("tls", str(pki.ca)))
        with BrokerProcess(Path(tmp) / "data", settings) as broker:
            for name, trust in runs:
                url = broker.service_url if trust is None else \
                    f"pulsar+ssl://127.0.0.1:{settings['brokerServicePortTls']}"
                print(json.dumps(max_rate(url, f"bench-max-{name}", args.messages // args.producers, args.size,
                                          args.producers, args.batch_delay_ms, trust)), flush=True)
                client = _client(url, trust)
                print(json.dumps({"url": url.split(":")[0],
                                  **fixed_rate(client, f"bench-fixed-{name}", args.rate, args.seconds, args.size)}),
                      flush=True)
                client.close()


if __name__ == "__main__":
    main()
