"""``magnetar perf produce|consume``: load generators like ``pulsar-perf``.

Every ``--stats-interval`` seconds a progress line shows msg/s, MB/s and latency
percentiles for that interval; at the end a summary covers the whole run. With
``--json`` the summary is one JSON object on stdout and progress goes to stderr.

Produce latency is send to receipt; consume latency is publish time to receipt
(meaningful when producer and consumer share a clock, as on one machine).
Latencies are kept in log-spaced buckets (1% wide), so memory stays flat on long runs.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from magnetar.cli.client import DEFAULT_SERVICE_URL, ServiceUrl, consumer_type, open_client, pulsar_module
from magnetar.cli.output import fail, parse_duration_ms

perf_app = typer.Typer(help="Load generators with live progress (like pulsar-perf).", no_args_is_help=True)

_BUCKET_BASE = math.log(1.01)
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99))


class LatencyHistogram:
    """Latencies in milliseconds, bucketed on a 1% log scale."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0

    def record(self, latency_ms: float) -> None:
        bucket = int(math.log(max(latency_ms, 0.001) * 1000) / _BUCKET_BASE)
        self.counts[bucket] = self.counts.get(bucket, 0) + 1
        self.count += 1
        self.total_ms += latency_ms
        self.max_ms = max(self.max_ms, latency_ms)

    def merge(self, other: LatencyHistogram) -> None:
        for bucket, n in other.counts.items():
            self.counts[bucket] = self.counts.get(bucket, 0) + n
        self.count += other.count
        self.total_ms += other.total_ms
        self.max_ms = max(self.max_ms, other.max_ms)

    def percentile(self, pct: float) -> float:
        if not self.count:
            return 0.0
        rank = math.ceil(self.count * pct / 100)
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return min(self.max_ms, math.exp((bucket + 1) * _BUCKET_BASE) / 1000)
        return self.max_ms

    def summary(self) -> dict[str, float]:
        values = {"mean": self.total_ms / self.count if self.count else 0.0}
        values.update({name: self.percentile(pct) for name, pct in PERCENTILES})
        values["max"] = self.max_ms
        return {k: round(v, 3) for k, v in values.items()}


@dataclass
class Window:
    messages: int = 0
    size_bytes: int = 0
    failures: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class Meter:
    """Counts from client callback threads; the main thread takes interval snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window = Window()
        self.total = Window()
        self.started = time.perf_counter()

    def record(self, size_bytes: int, latency_ms: float) -> None:
        with self._lock:
            self._window.messages += 1
            self._window.size_bytes += size_bytes
            self._window.latency.record(latency_ms)

    def failed(self) -> None:
        with self._lock:
            self._window.failures += 1

    def take(self) -> Window:
        with self._lock:
            window, self._window = self._window, Window()
        self.total.messages += window.messages
        self.total.size_bytes += window.size_bytes
        self.total.failures += window.failures
        self.total.latency.merge(window.latency)
        return window

    def done_messages(self) -> int:
        with self._lock:
            return self.total.messages + self._window.messages


def _line(verb: str, window: Window, seconds: float) -> str:
    lat = window.latency.summary()
    return (f"{verb}: {window.messages / seconds:10.1f} msg/s --- {window.size_bytes / seconds / 1e6:8.3f} MB/s"
            f" --- failures {window.failures} --- Latency ms: mean {lat['mean']:.3f} - med {lat['p50']:.3f}"
            f" - 95pct {lat['p95']:.3f} - 99pct {lat['p99']:.3f} - 99.9pct {lat['p999']:.3f}"
            f" - max {lat['max']:.3f}")


def _summary(mode: str, topic: str, meter: Meter, seconds: float) -> dict[str, Any]:
    total = meter.total
    return {"mode": mode, "topic": topic, "messages": total.messages, "bytes": total.size_bytes,
            "failures": total.failures, "durationSeconds": round(seconds, 3),
            "msgPerSec": round(total.messages / seconds, 1) if seconds else 0.0,
            "mbPerSec": round(total.size_bytes / seconds / 1e6, 3) if seconds else 0.0,
            "latencyMs": total.latency.summary()}


def _report_final(mode: str, topic: str, meter: Meter, json_output: bool) -> None:
    meter.take()
    seconds = max(time.perf_counter() - meter.started, 1e-9)
    summary = _summary(mode, topic, meter, seconds)
    if json_output:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    lat = summary["latencyMs"]
    typer.echo(f"Aggregated throughput stats --- {summary['messages']} messages --- {summary['msgPerSec']} msg/s"
               f" --- {summary['mbPerSec']} MB/s --- {summary['failures']} failures")
    typer.echo(f"Aggregated latency stats --- Latency ms: mean {lat['mean']} - med {lat['p50']} - 95pct"
               f" {lat['p95']} - 99pct {lat['p99']} - 99.9pct {lat['p999']} - 99.99pct {lat['p9999']}"
               f" - max {lat['max']}")


class Progress:
    def __init__(self, verb: str, meter: Meter, interval_s: float, json_output: bool) -> None:
        self.verb = verb
        self.meter = meter
        self.interval_s = interval_s
        self.stream = sys.stderr if json_output else sys.stdout
        self.last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        if now - self.last >= self.interval_s:
            window = self.meter.take()
            self.stream.write(_line(self.verb, window, now - self.last) + "\n")
            self.stream.flush()
            self.last = now


def _until(num_messages: int, time_ms: int, started: float, done: int) -> bool:
    if num_messages and done >= num_messages:
        return True
    return bool(time_ms) and (time.perf_counter() - started) * 1000 >= time_ms


@perf_app.command("produce")
def perf_produce(
    topic: str,
    rate: Annotated[float, typer.Option("--rate", "-r", help="Messages per second in total; 0 = unlimited")] = 100,
    size: Annotated[int, typer.Option("--size", "-s", help="Message size in bytes")] = 1024,
    num_messages: Annotated[int, typer.Option("--num-messages", "-m", help="Stop after this many; 0 = no limit")]
    = 0,
    duration: Annotated[str, typer.Option("--time", "-time", help="Stop after this long, e.g. 30s; 0 = no limit")]
    = "0",
    producers: Annotated[int, typer.Option("--num-producers", "-n")] = 1,
    batch_window_ms: Annotated[float, typer.Option("--batch-time-window", "-b", help="Batching delay (ms)")] = 1,
    batch_max_messages: Annotated[int, typer.Option("--batch-max-messages", "-bm")] = 1000,
    disable_batching: Annotated[bool, typer.Option("--disable-batching", "-db")] = False,
    keys: Annotated[int, typer.Option("--keys", "-k", help="Distinct message keys, round robin; 0 = no key")] = 0,
    max_outstanding: Annotated[int, typer.Option("--max-outstanding", "-o")] = 1000,
    compression: Annotated[str, typer.Option("--compression", "-z", help="NONE, LZ4, ZLIB, ZSTD, SNAPPY")]
    = "NONE",
    stats_interval: Annotated[float, typer.Option("--stats-interval", help="Seconds between progress lines")] = 5,
    service_url: ServiceUrl = DEFAULT_SERVICE_URL,
    json_output: Annotated[bool, typer.Option("--json", help="Final summary as JSON on stdout")] = False,
) -> None:
    """Publish at a target rate and report throughput and send latency."""
    if size < 0 or producers < 1 or rate < 0 or keys < 0 or max_outstanding < 1 or stats_interval <= 0:
        raise typer.BadParameter("sizes, rates and counts must be positive")
    module = pulsar_module()
    codec = getattr(module.CompressionType, {"ZLIB": "ZLib", "NONE": "NONE"}.get(compression.upper(),
                                                                              compression.upper()), None)
    if codec is None:
        raise typer.BadParameter(f"unknown compression {compression!r}")
    time_ms = parse_duration_ms(duration)
    meter = Meter()
    payload = os.urandom(size)

    def produce(client: Any) -> None:
        meter.started = time.perf_counter()
        options: dict[str, Any] = {
            "batching_enabled": not disable_batching, "batching_max_messages": batch_max_messages,
            "batching_max_publish_delay_ms": max(1, int(batch_window_ms)), "block_if_queue_full": True,
            "max_pending_messages": max_outstanding, "compression_type": codec}
        if keys and not disable_batching:
            options["batching_type"] = module.BatchingType.KeyBased
        handles = [client.create_producer(topic, **options) for _ in range(producers)]
        _produce_loop(handles, payload, rate, num_messages, time_ms, keys, meter,
                      Progress("Throughput produced", meter, stats_interval, json_output), module.Result.Ok)
        for producer in handles:
            producer.flush()
        _wait_outstanding(meter, num_messages)
    _run("produce", topic, service_url, meter, json_output, produce)


def _run(mode: str, topic: str, service_url: str, meter: Meter, json_output: bool,
         work: Callable[[Any], None]) -> None:
    """``work`` with a client until it is done or interrupted (Ctrl-C ends a run early, as in
    pulsar-perf), then the final report."""
    client = open_client(service_url)
    try:
        work(client)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        fail(f"perf {mode} on {topic} failed: {exc}")
    finally:
        client.close()
    _report_final(mode, topic, meter, json_output)


def _produce_loop(handles: list[Any], payload: bytes, rate: float, num_messages: int, time_ms: int, keys: int,
                  meter: Meter, progress: Progress, ok: Any) -> None:
    sent = 0
    size = len(payload)

    def callback_for(started: float) -> Callable[[Any, Any], None]:
        def done(result: Any, _message_id: Any) -> None:
            if result == ok:
                meter.record(size, (time.perf_counter() - started) * 1000)
            else:
                meter.failed()
        return done

    while not _until(num_messages, time_ms, meter.started, sent):
        if rate and sent >= rate * (time.perf_counter() - meter.started):
            time.sleep(min(0.001, 1 / rate))
            progress.tick()
            continue
        kwargs = {"partition_key": f"key-{sent % keys}"} if keys else {}
        handles[sent % len(handles)].send_async(payload, callback_for(time.perf_counter()), **kwargs)
        sent += 1
        if sent % 64 == 0:
            progress.tick()


def _wait_outstanding(meter: Meter, expected: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while expected and meter.done_messages() + meter.total.failures < expected and time.monotonic() < deadline:
        time.sleep(0.01)


@perf_app.command("consume")
def perf_consume(
    topic: str,
    subscription: Annotated[str, typer.Option("--subscriber-name", "-s", help="Subscription name")] = "sub",
    sub_type: Annotated[str, typer.Option("--subscription-type", "-t")] = "Exclusive",
    consumers: Annotated[int, typer.Option("--num-consumers", "-n")] = 1,
    num_messages: Annotated[int, typer.Option("--num-messages", "-m", help="Stop after this many; 0 = no limit")]
    = 0,
    duration: Annotated[str, typer.Option("--time", "-time", help="Stop after this long; 0 = no limit")] = "0",
    position: Annotated[str, typer.Option("--subscription-position", "-p", help="Latest or Earliest")] = "Latest",
    receiver_queue: Annotated[int, typer.Option("--receiver-queue-size", "-q")] = 1000,
    stats_interval: Annotated[float, typer.Option("--stats-interval", help="Seconds between progress lines")] = 5,
    service_url: ServiceUrl = DEFAULT_SERVICE_URL,
    json_output: Annotated[bool, typer.Option("--json", help="Final summary as JSON on stdout")] = False,
) -> None:
    """Consume and acknowledge as fast as possible; report throughput and end-to-end latency."""
    if position not in ("Latest", "Earliest"):
        raise typer.BadParameter("--subscription-position is Latest or Earliest")
    if consumers < 1 or stats_interval <= 0:
        raise typer.BadParameter("--num-consumers and --stats-interval must be positive")
    kind = consumer_type(sub_type)
    module = pulsar_module()
    time_ms = parse_duration_ms(duration)
    meter = Meter()

    def on_message(consumer: Any, msg: Any) -> None:
        latency_ms = max(0.0, time.time() * 1000 - msg.publish_timestamp())
        meter.record(len(msg.data()), latency_ms)
        consumer.acknowledge(msg)

    def consume(client: Any) -> None:
        handles = [client.subscribe(topic, subscription, consumer_type=kind, message_listener=on_message,
                                    receiver_queue_size=receiver_queue,
                                    initial_position=getattr(module.InitialPosition, position))
                   for _ in range(consumers)]
        progress = Progress("Throughput received", meter, stats_interval, json_output)
        meter.started = time.perf_counter()
        while not _until(num_messages, time_ms, meter.started, meter.done_messages()):
            time.sleep(0.01)
            progress.tick()
        for consumer in handles:
            consumer.close()
    _run("consume", topic, service_url, meter, json_output, consume)
