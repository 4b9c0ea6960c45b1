"""What producer deduplication costs: publish throughput on vs off, and recovery after kill -9.

1. ``throughput``: one broker (fsync on), fresh topics with the same setup whose only
   difference is the topic policy ``deduplicationEnabled`` true or false. PRODUCERS
   official-client producers (batching on, MESSAGES messages of SIZE bytes each, one
   process each so the client's Python cost does not cap the figure) publish as fast as
   they can; runs alternate off/on/on/off... so drift in the machine's load hits both
   sides alike. Prints one line per run and a summary with the ratio on/off (the
   target is at least 0.8).
2. ``recovery``: deduplication on, no snapshot ever taken (entries interval above the
   entry count, time-based snapshots off), 1,000 non-batched producers publish
   1,000,000 entries with explicit sequence ids; the broker is killed with SIGKILL and
   restarted. Measured: restart until the health check answers, and restart until a
   producer on the topic gets PRODUCER_SUCCESS (the broker replays every entry first).
   A few producers then check that ``last_sequence_id`` is the last id they sent.

Usage: python bench/dedup_bench.py [--phase all|throughput|recovery] [--messages 200000] [--producers 2]
       [--rounds 3] [--size 100] [--recovery-producers 1000] [--recovery-entries 1000000]
       [--recovery-keep-data DIR]
Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar

from magnetar.testing.broker_process import BrokerProcess

NAMESPACE = "public/default"


def _logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _admin(broker: BrokerProcess, method: str, path: str, body: bytes | None = None) -> bytes:
    request = urllib.request.Request(f"{broker.web_url}/admin/v2/{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return bytes(response.read())


def _create_topic(broker: BrokerProcess, dedup: bool) -> str:
    """A fresh topic whose deduplication comes from its own topic policy, set before it is loaded."""
    local = f"dedup-bench-{uuid.uuid4().hex[:8]}"
    _admin(broker, "PUT", f"persistent/{NAMESPACE}/{local}")
    _admin(broker, "POST", f"persistent/{NAMESPACE}/{local}/deduplicationEnabled", b"true" if dedup else b"false")
    return f"persistent://{NAMESPACE}/{local}"


# -- 1. throughput ------------------------------------------------------------------------------

def _produce(service_url: str, topic: str, n: int, size: int, go: Any, out: Any) -> None:
    client = pulsar.Client(service_url, io_threads=1, logger=_logger())
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=1, max_pending_messages=50000,
                                      block_if_queue_full=True)
    payload = b"x" * size
    failures = 0
    lock = threading.Lock()
    done = threading.Event()
    remaining = [n]

    def on_sent(result: pulsar.Result, _mid: object) -> None:
        nonlocal failures
        with lock:
            if result != pulsar.Result.Ok:
                failures += 1
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    out.put(("ready", 0, 0.0))
    go.wait()
    for _ in range(n):
        producer.send_async(payload, on_sent)
    producer.flush()
    done.wait(600)
    out.put(("done", failures, time.time()))
    client.close()


def throughput_run(broker: BrokerProcess, dedup: bool, messages: int, producers: int, size: int) -> dict[str, Any]:
    topic = _create_topic(broker, dedup)
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_produce, args=(broker.service_url, topic, messages, size, go, out))
             for _ in range(producers)]
    for proc in procs:
        proc.start()
    for _ in procs:
        if out.get(timeout=120)[0] != "ready":
            raise RuntimeError("a producer failed to start")
    start = time.time()
    go.set()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(60)
    failures = sum(r[1] for r in results)
    if failures:
        raise RuntimeError(f"{failures} sends failed with deduplication {'on' if dedup else 'off'}")
    elapsed = max(r[2] for r in results) - start
    stats = json.loads(_admin(broker, "GET", f"persistent/{NAMESPACE}/{topic.rsplit('/', 1)[1]}/stats"))
    total = messages * producers
    if stats["msgInCounter"] != total:
        raise RuntimeError(f"topic holds {stats['msgInCounter']} messages, expected {total}")
    return {"phase": "throughput_run", "dedup": dedup, "deduplicationStatus": stats["deduplicationStatus"],
            "messages": total, "producers": producers, "size_bytes": size, "seconds": round(elapsed, 3),
            "msgs_per_s": round(total / elapsed)}


def throughput(messages: int, producers: int, size: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "data", {"journalSyncData": "true"}) as broker:
        throughput_run(broker, True, messages // 10, producers, size)  # warm-up, not counted
        rates: dict[bool, list[int]] = {False: [], True: []}
        for i in range(rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for dedup in order:
                row = throughput_run(broker, dedup, messages, producers, size)
                rates[dedup].append(row["msgs_per_s"])
                print(json.dumps(row), flush=True)
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(json.dumps({"phase": "throughput", "producers": producers, "messages_per_run": messages * producers,
                          "size_bytes": size, "batching": True, "fsync": True, "runs_per_side": rounds,
                          "off_msgs_per_s": rates[False], "on_msgs_per_s": rates[True],
                          "off_median_msgs_per_s": round(off), "on_median_msgs_per_s": round(on),
                          "ratio_on_off": round(on / off, 3), "floor": 0.8}), flush=True)


# -- 2. recovery --------------------------------------------------------------------------------

def _producer_name(index: int) -> str:
    return f"recovery-{index:05d}"


def _first_sequence_id(index: int) -> int:
    """Producers start at different ids, so a mix-up between producers shows in the check."""
    return index * 7


def _publish_for_recovery(service_url: str, topic: str, indexes: list[int], per_producer: int, out: Any) -> None:
    """Non-batched sends, producers interleaved, so every message is an entry of its own."""
    client = pulsar.Client(service_url, io_threads=1, operation_timeout_seconds=120, logger=_logger())
    producers = [client.create_producer(topic, producer_name=_producer_name(i), batching_enabled=False,
                                        send_timeout_millis=0, max_pending_messages=200, block_if_queue_full=True)
                 for i in indexes]
    failures = 0
    lock = threading.Lock()

    def on_sent(result: pulsar.Result, _mid: object) -> None:
        nonlocal failures
        if result != pulsar.Result.Ok:
            with lock:
                failures += 1

    payload = b"r" * 100
    for j in range(per_producer):
        for index, producer in zip(indexes, producers, strict=True):
            producer.send_async(payload, on_sent, sequence_id=_first_sequence_id(index) + j)
    for producer in producers:
        producer.flush()
    out.put(failures)
    client.close()


def recovery(producers: int, entries: int, processes: int, checks: int, keep: Path | None = None) -> None:
    """Run the recovery measurement; ``keep`` names a new directory that keeps the broker's data afterwards."""
    if keep is not None:
        keep.mkdir(parents=True)
        _recovery(producers, entries, processes, checks, keep / "data")
        return
    with tempfile.TemporaryDirectory() as tmp:
        _recovery(producers, entries, processes, checks, Path(tmp) / "data")


def _recovery(producers: int, entries: int, processes: int, checks: int, data: Path) -> None:
    per_producer = entries // producers
    total = per_producer * producers
    config = {"journalSyncData": "true", "brokerDeduplicationEnabled": "true",
              "brokerDeduplicationEntriesInterval": str(total * 10),
              # 0 turns time-based snapshots off; any other value takes the first one within a second
              "brokerDeduplicationSnapshotIntervalSeconds": "0",
              "brokerDeduplicationMaxNumberOfProducers": str(max(10_000, producers))}
    broker = BrokerProcess(data, config).start()
    try:
        topic = f"persistent://{NAMESPACE}/dedup-recovery"
        _admin(broker, "PUT", f"persistent/{NAMESPACE}/dedup-recovery")
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        groups = [list(range(p, producers, processes)) for p in range(processes)]
        start = time.time()
        procs = [ctx.Process(target=_publish_for_recovery, args=(broker.service_url, topic, g, per_producer, out))
                 for g in groups]
        for proc in procs:
            proc.start()
        failures = sum(out.get(timeout=3600) for _ in procs)
        for proc in procs:
            proc.join(60)
        publish_s = time.time() - start
        internal = json.loads(_admin(broker, "GET", f"persistent/{NAMESPACE}/dedup-recovery/internalStats"))
        stored = int(internal["numberOfEntries"])
        if failures or stored != total:
            raise RuntimeError(f"{failures} sends failed; {stored} entries stored, expected {total}")
        broker.kill()
        snapshot = _dedup_cursor(data, topic)

        t0 = time.monotonic()
        broker.start(timeout_s=120)
        t_ready = time.monotonic()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=600, logger=_logger())
        first = client.create_producer(topic, producer_name=_producer_name(0))
        t_producer = time.monotonic()
        rng = random.Random(1)
        checked = [0, producers - 1] + rng.sample(range(1, producers - 1), max(0, checks - 2))
        wrong = {}
        for index in checked:
            producer = first if index == 0 else client.create_producer(topic, producer_name=_producer_name(index))
            expected = _first_sequence_id(index) + per_producer - 1
            if producer.last_sequence_id() != expected:
                wrong[_producer_name(index)] = (producer.last_sequence_id(), expected)
        client.close()
        print(json.dumps({"phase": "recovery", "producers": producers, "entries_since_snapshot": stored,
                          "snapshot_before_kill": snapshot, "publish_s": round(publish_s, 1),
                          "restart_to_health_s": round(t_ready - t0, 3),
                          "restart_to_producer_success_s": round(t_producer - t0, 3),
                          "producers_checked": len(checked), "last_sequence_id_wrong": wrong}), flush=True)
        if wrong:
            raise AssertionError(f"wrong last_sequence_id after recovery: {wrong}")
    finally:
        broker.kill()


def _dedup_cursor(data: Path, topic: str) -> str | None:
    """The dedup snapshot's position in the (stopped) broker's metadata, None when there is none."""
    from magnetar.server.deduplication import DEDUP_CURSOR
    from magnetar.storage.metadata_store import MetadataStore
    store = MetadataStore(data / "metadata.db")
    try:
        record = store.get_cursor(topic, DEDUP_CURSOR)
    finally:
        store.close()
    return None if record is None else str(record.mark_delete)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=("all", "throughput", "recovery"), default="all")
    parser.add_argument("--messages", type=int, default=200_000, help="per producer and run")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="runs per side")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--recovery-producers", type=int, default=1000)
    parser.add_argument("--recovery-entries", type=int, default=1_000_000)
    parser.add_argument("--recovery-processes", type=int, default=2)
    parser.add_argument("--recovery-checks", type=int, default=5)
    parser.add_argument("--recovery-keep-data", type=Path, default=None,
                        help="a new directory that keeps the recovery phase's broker data (to profile a restart)")
    args = parser.parse_args()
    if args.phase in ("all", "throughput"):
        throughput(args.messages, args.producers, args.size, args.rounds)
    if args.phase in ("all", "recovery"):
        recovery(args.recovery_producers, args.recovery_entries, args.recovery_processes, args.recovery_checks,
                 args.recovery_keep_data)


if __name__ == "__main__":
    main()
