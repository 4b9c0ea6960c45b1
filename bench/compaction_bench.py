"""What topic compaction costs: disk before and after, the broker's memory while it runs, time.

One broker (fsync on) and one topic. The official client publishes MESSAGES messages of
SIZE bytes over KEYS keys (key ``i % KEYS``; batching on unless ``--no-batch``), then the
admin API triggers a compaction and the status is polled until it ends. Measured:

- ``disk_before_bytes``: the topic's segment files when compaction starts;
- ``disk_after_bytes``: the compacted view's file when it ends;
- ``rss_before_bytes`` / ``rss_peak_bytes``: the broker's resident memory just before
  the trigger, and the highest sample (every 20 ms, from /proc) while it ran;
- ``seconds``: trigger until the status says SUCCESS;
- ``loop_median_answer_ms`` / ``loop_max_answer_ms``: answers to ``GET /admin/v2/brokers/ready``
  while it ran (the event loop must keep serving: compaction runs on an executor thread,
  which shares the GIL with it).

A readCompacted reader then checks the view holds exactly one message per key.

Usage: python bench/compaction_bench.py [--messages 1000000] [--keys 10000] [--size 100] [--no-batch]
Prints JSON lines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pulsar

from magnetar.storage.segment_ledger import topic_dir_name
from magnetar.testing.broker_process import BrokerProcess

TOPIC = "persistent://public/default/compaction-bench"
PATH = "persistent/public/default/compaction-bench"


def _http(broker: BrokerProcess, method: str, path: str, parse: bool = True) -> Any:
    request = urllib.request.Request(f"{broker.web_url}/admin/v2/{path}", method=method)
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
    return json.loads(body) if body and parse else body


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def publish(broker: BrokerProcess, messages: int, keys: int, size: int, batch: bool) -> float:
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(TOPIC, batching_enabled=batch, batching_max_messages=1000,
                                      batching_max_allowed_size_in_bytes=1 << 20, max_pending_messages=20000,
                                      block_if_queue_full=True)
    started = time.monotonic()
    value = b"v" * size
    for i in range(messages):
        producer.send_async(value, None, partition_key=f"key-{i % keys}")
    producer.flush()
    seconds = time.monotonic() - started
    client.close()
    return seconds


def compact(broker: BrokerProcess) -> dict[str, float]:
    """Trigger, then sample memory and the loop's answer time until the status is final."""
    pid = broker.proc.pid if broker.proc is not None else 0
    peak = _rss_bytes(pid)
    stalls_ms: list[float] = []
    done = threading.Event()

    def sample_memory() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    started = time.monotonic()
    _http(broker, "PUT", f"{PATH}/compaction")
    while True:
        asked = time.monotonic()
        _http(broker, "GET", "brokers/ready", parse=False)
        stalls_ms.append((time.monotonic() - asked) * 1000)
        status = _http(broker, "GET", f"{PATH}/compaction")
        if status["status"] != "RUNNING":
            break
        time.sleep(0.05)
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if status["status"] != "SUCCESS":
        raise SystemExit(f"compaction failed: {status}")
    return {"seconds": round(seconds, 2), "rss_peak_bytes": peak,
            "loop_median_answer_ms": round(statistics.median(stalls_ms), 1),
            "loop_max_answer_ms": round(max(stalls_ms), 1)}


def check_view(broker: BrokerProcess, keys: int) -> int:
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True,
                                  receiver_queue_size=5000)
    seen: set[str] = set()
    count = 0
    while reader.has_message_available():
        seen.add(reader.read_next(timeout_millis=10000).partition_key())
        count += 1
    client.close()
    if count != keys or len(seen) != keys:
        raise SystemExit(f"the compacted view holds {count} messages over {len(seen)} keys, expected {keys}")
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--no-batch", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        data = Path(tmp) / "data"
        with BrokerProcess(data) as broker:
            publish_s = publish(broker, args.messages, args.keys, args.size, not args.no_batch)
            print(json.dumps({"phase": "publish", "messages": args.messages, "keys": args.keys, "size": args.size,
                              "batching": not args.no_batch, "seconds": round(publish_s, 2)}), flush=True)
            pid = broker.proc.pid if broker.proc is not None else 0
            disk_before = _dir_bytes(data / "ledgers" / topic_dir_name(TOPIC))
            rss_before = _rss_bytes(pid)
            measured = compact(broker)
            disk_after = _dir_bytes(data / "compacted" / topic_dir_name(TOPIC))
            view = check_view(broker, args.keys)
            print(json.dumps({"phase": "compaction", "messages": args.messages, "keys": args.keys,
                              "disk_before_bytes": disk_before, "disk_after_bytes": disk_after,
                              "rss_before_bytes": rss_before, **measured, "view_messages": view}), flush=True)


if __name__ == "__main__":
    main()
