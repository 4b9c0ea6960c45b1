"""Publish latency at fixed rates, send to receipt, with the broker's event-loop lag beside it.

One producer publishes 100-byte messages at a fixed rate for ``--duration`` seconds, twice
over: through the official client (``pulsar-client``, batching with a 1 ms delay, as a
latency-minded application would) and at the protocol level (pre-encoded unbatched SEND
frames on one socket, paced by the clock, sends never held back by missing receipts).
Each message's latency is from the moment it was handed over (``send_async`` called, or
its bytes written) to its receipt; percentiles p50, p99, p99.9, p99.99 and the maximum
are printed per rate and load. The broker runs with ``journalSyncData`` on (a sync before
every receipt) unless ``--no-sync``.

For Magnetar the loop-lag series of ``/metrics`` are scraped before and after each load
(and every few seconds during it): how many timer rings were later than 5 and 20 ms, the
histogram's bucket that holds the latest ring, and the longest-stall gauge's highest
reading. ``--idle-topics N`` loads N topics (one message each, no producer left) before
measuring, as a broker holding many quiet topics does.

``--peer pulsar-lite`` runs the same loads against pulsar-lite (an embedded broker
written in Rust, which acknowledges without syncing) in the same run, each load against
one broker then the other: the binary comes from ``--peer-binary``, from an installed
``pulsar_lite`` package, or from ``pip download pulsar-lite`` into ``--cache-dir``.

    python bench/latency_bench.py                                  # 1,000 / 10,000 / 50,000 msgs/s
    python bench/latency_bench.py --rates 10000 --duration 60 --idle-topics 1000 --peer pulsar-lite
    python bench/latency_bench.py --broker-src /tmp/old-checkout   # an older commit's broker
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from wire_bench import connect, make_sends, receive  # noqa: E402

from magnetar.testing.broker_process import (  # noqa: E402
    BrokerProcess,
    checkout_source,
    free_port,
    start_from_checkout,
)
from magnetar.wire import pulsar_api_pb2 as pb  # noqa: E402
from magnetar.wire.frames import FrameDecoder, encode_command, encode_payload_command, make_entry  # noqa: E402

T = pb.BaseCommand
QUANTILES = (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999))
PULSAR_LITE = "pulsar-lite==0.2.0"
#: seconds between /metrics readings during a load: the longest-stall gauge covers 10 to 20 s
SCRAPE_EVERY_S = 8.0


def percentiles_ms(latencies: list[float]) -> dict[str, float | None]:
    ordered = sorted(latencies)
    if not ordered:
        return {name: None for name, _ in (*QUANTILES, ("max", 1))}
    out: dict[str, float | None] = {
        name: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3) for name, q in QUANTILES}
    out["max"] = round(ordered[-1] * 1000, 3)
    return out


def paced(rate: float, total: int) -> Iterator[tuple[int, int]]:
    """(first, end) of the messages due now, at ``rate`` from the first call on; sleeps
    between the steps, so a producer behind schedule catches up at once."""
    started = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - started) * rate) + 1)
        if due > sent:
            yield sent, due
            sent = due
        wait = started + sent / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)


# -- loads ------------------------------------------------------------------------------------
def official_load(url: str, topic: str, rate: float, total: int, size: int, batching_ms: int,
                  timeout_s: float) -> tuple[list[float], int]:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=batching_ms > 0,
                                          batching_max_publish_delay_ms=max(1, batching_ms),
                                          batching_max_messages=1000, max_pending_messages=0,
                                          block_if_queue_full=True)
        payload = b"x" * size
        for _ in range(100):  # connection and first batches warm before the clock starts
            producer.send(payload)
        sent_at = [0.0] * total
        latencies: list[float] = []
        failures = [0]
        done = threading.Event()
        left = [total]
        lock = threading.Lock()

        def on_receipt(index: int, result: Any, _message_id: Any) -> None:
            at = time.perf_counter()
            with lock:
                if result == pulsar.Result.Ok:
                    latencies.append(at - sent_at[index])
                else:
                    failures[0] += 1
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        for first, end in paced(rate, total):
            for i in range(first, end):
                sent_at[i] = time.perf_counter()
                producer.send_async(payload, partial(on_receipt, i))
        if not done.wait(timeout_s):
            raise TimeoutError(f"{left[0]} receipts missing after {timeout_s} s")
        producer.close()
        return latencies, failures[0]
    finally:
        client.close()


def protocol_load(port: int, topic: str, rate: float, total: int, size: int,
                  timeout_s: float) -> tuple[list[float], int]:
    sock, decoder = connect(port), FrameDecoder(64 << 20)
    try:
        receive(sock, decoder)
        create = T(type=T.PRODUCER)
        create.producer.topic, create.producer.producer_id, create.producer.request_id = topic, 1, 1
        create.producer.producer_name = f"latency-bench-{os.getpid()}-{time.monotonic_ns()}"
        sock.sendall(encode_command(create))
        while not any(f.command.type == T.PRODUCER_SUCCESS for f in receive(sock, decoder)):
            pass
        sends = make_sends(create.producer.producer_name, total, 1, size)
        sent_at = [0.0] * total
        latencies: list[float] = []
        failures = 0

        def take_receipts(wait_s: float) -> None:
            nonlocal failures
            while select.select([sock], [], [], max(0.0, wait_s))[0]:
                for frame in receive(sock, decoder):
                    if frame.command.type == T.SEND_RECEIPT:
                        latencies.append(time.perf_counter() - sent_at[frame.command.send_receipt.sequence_id])
                    elif frame.command.type == T.SEND_ERROR:
                        failures += 1
                wait_s = 0.0

        started = time.perf_counter()
        sent = 0
        while sent < total:
            due = min(total, int((time.perf_counter() - started) * rate) + 1)
            if due > sent:
                now = time.perf_counter()
                for i in range(sent, due):
                    sent_at[i] = now
                sock.sendall(b"".join(sends[sent:due]))
                sent = due
            take_receipts(started + sent / rate - time.perf_counter())
        deadline = time.perf_counter() + timeout_s
        while len(latencies) + failures < total:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{total - len(latencies) - failures} receipts missing after {timeout_s} s")
            take_receipts(0.1)
        return latencies, failures
    finally:
        sock.close()


def load_idle_topics(port: int, count: int, prefix: str) -> None:
    """``count`` topics with one message and a subscription each (so the inactive-topic
    check keeps them, as it keeps any topic with a subscription) and no client left on them."""
    sock, decoder = connect(port), FrameDecoder(64 << 20)
    try:
        receive(sock, decoder)
        for start in range(0, count, 200):
            ids = range(start + 1, min(count, start + 200) + 1)
            for pid in ids:
                cmd = T(type=T.PRODUCER)
                cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = f"{prefix}-{pid}", pid, pid
                sock.sendall(encode_command(cmd))
            waiting = set(ids)
            while waiting:
                for frame in receive(sock, decoder):
                    if frame.command.type == T.PRODUCER_SUCCESS:
                        waiting.discard(frame.command.producer_success.request_id)
                    elif frame.command.type == T.ERROR:
                        raise RuntimeError(f"idle topic not created: {frame.command.error}")
            for pid in ids:
                sock.sendall(_send_frame(pid, f"{prefix}-producer-{pid}"))
            receipts = 0
            while receipts < len(ids):
                receipts += sum(f.command.type == T.SEND_RECEIPT for f in receive(sock, decoder))
            for pid in ids:
                close = T(type=T.CLOSE_PRODUCER)
                close.close_producer.producer_id, close.close_producer.request_id = pid, count + pid
                sock.sendall(encode_command(close))
                sub = T(type=T.SUBSCRIBE)
                sub.subscribe.topic, sub.subscribe.subscription = f"{prefix}-{pid}", "idle"
                sub.subscribe.consumer_id, sub.subscribe.request_id = pid, 2 * count + pid
                sub.subscribe.subType = pb.CommandSubscribe.Exclusive
                sock.sendall(encode_command(sub))
            subscribed = 0
            while subscribed < len(ids):
                for frame in receive(sock, decoder):
                    if frame.command.type == T.SUCCESS and frame.command.success.request_id > 2 * count:
                        subscribed += 1
                    elif frame.command.type == T.ERROR:
                        raise RuntimeError(f"idle topic not subscribed: {frame.command.error}")
            for pid in ids:
                close = T(type=T.CLOSE_CONSUMER)
                close.close_consumer.consumer_id, close.close_consumer.request_id = pid, 3 * count + pid
                sock.sendall(encode_command(close))
    finally:
        sock.close()


def _send_frame(producer_id: int, name: str) -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=0, publish_time=int(time.time() * 1000))
    cmd = T(type=T.SEND)
    cmd.send.producer_id, cmd.send.sequence_id = producer_id, 0
    return encode_payload_command(cmd, make_entry(metadata, b"idle"))


# -- the broker's loop lag -----------------------------------------------------------------------
_SAMPLE = re.compile(r"^(magnetar_event_loop_\w+?|pulsar_broker_publish_latency\w*)(?:\{([^}]*)\})? (\S+)$",
                     re.MULTILINE)


#: the lines of /metrics that read_lag parses (``grep -E``): a few dozen of millions of bytes
_WANTED = r"^(magnetar_event_loop_|pulsar_broker_publish_latency)"
#: the same filter in another Python process, where curl and grep are missing
_FILTER_IN_PYTHON = (
    "import re, sys, urllib.request\n"
    "wanted = re.compile(sys.argv[2].encode())\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=30) as answer:\n"
    "    sys.stdout.buffer.writelines(line for line in answer if wanted.match(line))\n")


def scraped_lines(web_url: str) -> str:
    """The lines of /metrics that read_lag wants, read and filtered in other processes. With
    1,000 topics the text is 8.8 MB: read, decoded and searched in this process, it held the
    interpreter lock that the load's sending and receiving threads need for a good part of a
    second each time, and the receipts read late showed as the broker's latency."""
    url = f"{web_url}/metrics"
    if shutil.which("curl") and shutil.which("grep"):
        curl = subprocess.Popen(["curl", "-sS", "--max-time", "30", url], stdout=subprocess.PIPE)
        try:
            found = subprocess.run(["grep", "-E", _WANTED], stdin=curl.stdout, capture_output=True, timeout=60).stdout
        finally:
            assert curl.stdout is not None
            curl.stdout.close()
            if curl.wait(timeout=60) != 0:
                raise RuntimeError(f"curl {url} failed with status {curl.returncode}")
    else:
        found = subprocess.run([sys.executable, "-c", _FILTER_IN_PYTHON, url, _WANTED], capture_output=True,
                               timeout=60, check=True).stdout
    return found.decode()


def read_lag(web_url: str) -> dict[str, Any]:
    text = scraped_lines(web_url)
    buckets: dict[float, float] = {}
    values: dict[str, float] = {}
    durable: dict[str, float] = {}
    for name, labels, value in _SAMPLE.findall(text):
        quantile = re.search(r'quantile="([^"]+)"', labels or "")
        if name == "pulsar_broker_publish_latency" and quantile is not None:
            durable[quantile.group(1)] = float(value)
        elif name.endswith("_bucket"):
            le = re.search(r'le="([^"]+)"', labels or "")
            if le is not None:
                buckets[float(le.group(1))] = float(value)
        else:
            values[name] = float(value)
    return {"buckets": buckets, "count": values.get("magnetar_event_loop_lag_seconds_count", 0.0),
            "longest_s": values.get("magnetar_event_loop_longest_stall_seconds", 0.0),
            "stalls": values.get("magnetar_event_loop_stalls_total", 0.0), "durable_quantiles": durable,
            "durable_count": values.get("pulsar_broker_publish_latency_count", 0.0),
            "durable_sum": values.get("pulsar_broker_publish_latency_sum", 0.0)}


class LagWatch:
    """/metrics read before, every SCRAPE_EVERY_S during, and after a load."""

    def __init__(self, web_url: str) -> None:
        self.web_url = web_url
        self.before = read_lag(web_url)
        self.longest_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(SCRAPE_EVERY_S):
            self.longest_s = max(self.longest_s, read_lag(self.web_url)["longest_s"])

    def finish(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        after = read_lag(self.web_url)
        before = self.before
        rings = after["count"] - before["count"]

        def later_than(bound_s: float) -> int:
            return round(rings - (after["buckets"].get(bound_s, 0.0) - before["buckets"].get(bound_s, 0.0)))

        durable = after["durable_count"] - before["durable_count"]
        durable_s = after["durable_sum"] - before["durable_sum"]
        latest = None
        for bound in sorted(after["buckets"]):
            if after["buckets"][bound] - before["buckets"].get(bound, 0.0) >= rings:
                latest = bound
                break
        return {"timer_rings": round(rings), "rings_later_than_5ms": later_than(0.005),
                "rings_later_than_20ms": later_than(0.02),
                "latest_ring_at_most_ms": None if latest is None else latest * 1000,
                "longest_stall_gauge_ms": round(max(self.longest_s, after["longest_s"]) * 1000, 1),
                "stalls_over_threshold": round(after["stalls"] - before["stalls"]),
                # the broker's own append-to-durable time (pulsar_broker_publish_latency): its
                # mean over the load, and its quantiles over its most recent samples
                "append_to_durable_mean_ms": round(durable_s * 1000 / durable, 3) if durable else None,
                "append_to_durable_recent_ms": {q: round(v * 1000, 3) for q, v in after["durable_quantiles"].items()}}


# -- the brokers ---------------------------------------------------------------------------------
class Target:
    def __init__(self, name: str, port: int, web_url: str | None, pid: int, stop: Callable[[], None]) -> None:
        self.name, self.port, self.web_url, self.pid, self.stop = name, port, web_url, pid, stop

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"


@contextmanager
def magnetar(tmp: Path, args: argparse.Namespace) -> Iterator[Target]:
    config = {"journalSyncData": "false" if args.no_sync else "true", **dict(args.set)}
    broker = start_from_checkout(BrokerProcess(tmp / "magnetar", config), args.broker_src)
    assert broker.proc is not None
    try:
        yield Target("magnetar", broker.port, broker.web_url, broker.proc.pid, broker.stop)
    finally:
        broker.stop()
        if args.broker_log:
            shutil.copyfile(broker.log_path, args.broker_log)


def pulsar_lite_binary(args: argparse.Namespace) -> Path:
    if args.peer_binary:
        return Path(args.peer_binary)
    try:
        import pulsar_lite  # type: ignore[import-not-found]

        found = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
        if found.is_file():
            return found
    except ImportError:
        pass
    cache = Path(args.cache_dir)
    binary = cache / "pulsar-lite"
    if not binary.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(cache), PULSAR_LITE],
                       check=True, stdout=subprocess.DEVNULL)
        wheel = next(cache.glob("pulsar_lite-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith("/bin/pulsar-lite"))
            with archive.open(member) as source, open(binary, "wb") as out:
                shutil.copyfileobj(source, out)
        binary.chmod(0o755)
    return binary


@contextmanager
def pulsar_lite(tmp: Path, args: argparse.Namespace) -> Iterator[Target]:
    port = free_port()
    log = open(tmp / "pulsar-lite.log", "wb")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([str(pulsar_lite_binary(args)), "--addr", f"127.0.0.1:{port}",
                             "--db-path", str(tmp / "pulsar-lite"), "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pulsar-lite did not start (see {tmp / 'pulsar-lite.log'})") from None
                time.sleep(0.05)
        yield Target("pulsar-lite", port, None, proc.pid, proc.terminate)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the run --------------------------------------------------------------------------------------
def measure(target: Target, load: str, rate: int, args: argparse.Namespace, run: int) -> dict[str, Any]:
    topic = f"persistent://public/default/latency-{load}-{rate}-{run}-{time.monotonic_ns()}"
    total = int(rate * args.duration)
    watch = LagWatch(target.web_url) if target.web_url else None
    load_before, cpu_before, started = os.getloadavg()[0], cpu_seconds(target.pid), time.perf_counter()
    if load == "official":
        latencies, failures = official_load(target.url, topic, rate, total, args.size, args.batching_ms, args.timeout)
    else:
        latencies, failures = protocol_load(target.port, topic, rate, total, args.size, args.timeout)
    elapsed = time.perf_counter() - started
    row: dict[str, Any] = {
        "broker": target.name, "load": load, "rate": rate, "run": run, "messages": total, "failures": failures,
        "achieved_msgs_per_s": round(total / elapsed), **percentiles_ms(latencies),
        "broker_cpu_s": round(cpu_seconds(target.pid) - cpu_before, 2),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if watch is not None:
        row["loop"] = watch.finish()
    return row


def summary(row: dict[str, Any]) -> str:
    figures = "  ".join(f"{name} {row[name]:.2f}" for name in ("p50", "p99", "p99.9", "p99.99", "max"))
    line = f"{row['broker']:>11} {row['load']:>8} {row['rate']:>6}/s  {figures} ms"
    loop = row.get("loop")
    if loop:
        line += (f"  | loop: {loop['rings_later_than_5ms']}/{loop['timer_rings']} rings >5 ms, "
                 f"{loop['rings_later_than_20ms']} >20 ms, latest <= {loop['latest_ring_at_most_ms']} ms, "
                 f"longest stall {loop['longest_stall_gauge_ms']} ms; append to durable: mean "
                 f"{loop['append_to_durable_mean_ms']} ms, recent {loop['append_to_durable_recent_ms']}")
    return line + f"  (load {row['load_avg_1m'][0]}-{row['load_avg_1m'][1]})"


def parse_rates(text: str) -> list[int]:
    try:
        rates = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: rates are whole msgs/s, comma-separated") from None
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one rate, each above 0")
    return rates


def parse_loads(text: str) -> list[str]:
    loads = [part.strip() for part in text.split(",") if part.strip()]
    wrong = [load for load in loads if load not in ("official", "protocol")]
    if not loads or wrong:
        raise argparse.ArgumentTypeError(f"{text!r}: loads are 'official' and/or 'protocol'")
    return loads


def parse_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE")
    return key.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rates", type=parse_rates, default=[1000, 10000, 50000], help="msgs/s, comma-separated")
    p.add_argument("--loads", type=parse_loads, default=["official", "protocol"], help="official,protocol")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per load")
    p.add_argument("--size", type=int, default=100, help="bytes per message")
    p.add_argument("--batching-ms", type=int, default=1, help="the official client's batching delay (0: none)")
    p.add_argument("--runs", type=int, default=1, help="each load this many times")
    p.add_argument("--idle-topics", type=int, default=0, help="topics loaded and left idle before measuring")
    p.add_argument("--peer", choices=["pulsar-lite"], help="the same loads against this broker, side by side")
    p.add_argument("--peer-binary", help="the peer's executable (default: installed or downloaded)")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "magnetar-bench"),
                   help="where a downloaded peer is kept")
    p.add_argument("--no-sync", action="store_true", help="journalSyncData=false")
    p.add_argument("--broker-src", help="run the broker of this checkout (its src/) to compare versions")
    p.add_argument("--set", type=parse_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of Magnetar's (repeatable), e.g. loopStallThresholdMillis=5")
    p.add_argument("--broker-log", help="keep Magnetar's log here (its stall lines name what held the loop)")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for a load's last receipts")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    if args.duration <= 0 or args.size <= 0 or args.runs <= 0 or args.idle_topics < 0 or args.batching_ms < 0:
        p.error("--duration, --size and --runs must be above 0; --idle-topics and --batching-ms not below 0")
    if args.peer_binary and not Path(args.peer_binary).is_file():
        p.error(f"--peer-binary {args.peer_binary}: no such file")
    if args.broker_src:
        try:
            checkout_source(args.broker_src)
        except ValueError as exc:
            p.error(str(exc))
    with tempfile.TemporaryDirectory(prefix="latency-bench-") as name:
        tmp = Path(name)
        with magnetar(tmp, args) as ours:
            targets = [ours]
            peer = pulsar_lite(tmp, args) if args.peer == "pulsar-lite" else None
            if peer is not None:
                targets.append(peer.__enter__())
            try:
                for target in targets:
                    if args.idle_topics:
                        load_idle_topics(target.port, args.idle_topics, "persistent://public/default/idle")
                if args.idle_topics:
                    os.sync()  # the writeback of the idle topics' new files is not the publishes' cost
                for run in range(args.runs):
                    for rate in args.rates:
                        for load in args.loads:
                            for target in targets:
                                row = measure(target, load, rate, args, run)
                                print(json.dumps(row), flush=True)
                                print(summary(row), file=sys.stderr, flush=True)
            finally:
                if peer is not None:
                    peer.__exit__(None, None, None)


if __name__ == "__main__":
    main()
