"""Crash trial for effectively-once publishing: kill -9 the broker while a producer sends.

A producer with deduplication on, no send timeout and explicit sequence ids publishes
``messages`` messages; meanwhile the broker is killed with SIGKILL ``kills`` times at
random moments and restarted on the same data. A reader then checks that every
sequence id is stored exactly once, in order.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pulsar

from magnetar.testing.broker_process import BrokerProcess


def quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@dataclass
class CrashTrialResult:
    messages: int
    kills: int
    duplicates: int
    losses: int
    out_of_order: int
    recovery_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0


def run_trial(data_dir: Path, messages: int, kills: int, seed: int, batching: bool = False) -> CrashTrialResult:
    rng = random.Random(seed)
    broker = BrokerProcess(data_dir, {"brokerDeduplicationEnabled": "true"})
    broker.start()
    start = time.monotonic()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=quiet_logger())
    producer = client.create_producer("dedup-crash", producer_name="crash-producer", send_timeout_millis=0,
                                      batching_enabled=batching, max_pending_messages=5000,
                                      block_if_queue_full=True)
    acked = threading.Semaphore(0)
    errors: list[str] = []

    def on_sent(result: pulsar.Result, _mid: object) -> None:
        if result != pulsar.Result.Ok:
            errors.append(str(result))
        acked.release()

    sender = threading.Thread(target=lambda: [producer.send_async(str(i).encode(), on_sent, sequence_id=i)
                                              for i in range(messages)], daemon=True)
    sender.start()
    recovery: list[float] = []
    for _ in range(kills):
        time.sleep(rng.uniform(0.2, 1.0))
        broker.kill()
        t0 = time.monotonic()
        broker.start()
        recovery.append(time.monotonic() - t0)
    sender.join()
    for _ in range(messages):
        if not acked.acquire(timeout=120):
            raise TimeoutError("producer did not get every receipt within 120 s")
    client.close()
    stored = read_sequence(broker)
    broker.kill()
    if errors:
        raise AssertionError(f"send errors: {errors[:5]}")
    return summarize(stored, messages, kills, recovery, time.monotonic() - start)


def read_sequence(broker: BrokerProcess) -> list[int]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30, logger=quiet_logger())
    reader = client.create_reader("dedup-crash", pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(int(reader.read_next(timeout_millis=10_000).data()))
    client.close()
    return out


def summarize(stored: list[int], messages: int, kills: int, recovery: list[float], elapsed: float) -> CrashTrialResult:
    seen = set(stored)
    duplicates = len(stored) - len(seen)
    losses = len(set(range(messages)) - seen)
    out_of_order = sum(1 for a, b in zip(stored, stored[1:], strict=False) if b <= a)
    return CrashTrialResult(messages, kills, duplicates, losses, out_of_order, recovery, elapsed)
