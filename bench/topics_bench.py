"""Many topics on a broker with few descriptors: open files and memory per topic.

Starts a broker under ``ulimit -n`` (``--nofile``, default 4096) with idle topics unloaded
after ``--idle`` seconds. In waves of ``--wave`` topics, one connection per wave creates
a producer on each topic, sends one message, subscribes, and closes; between waves the
broker is sampled (descriptors, RSS, loaded topics). Then every topic is checked: its
subscription receives the message, and one more message is published. Prints RSS per
loaded topic (measured on the first wave, before any unloading) and per unloaded topic.

    python bench/topics_bench.py --topics 50000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.testing.broker_process import BrokerProcess  # noqa: E402
from magnetar.testing.raw_client import RawConnection, T, flow, producer, subscribe  # noqa: E402
from magnetar.wire import pulsar_api_pb2 as pb  # noqa: E402


def rss_mb(broker: BrokerProcess) -> float:
    assert broker.proc is not None
    for line in Path(f"/proc/{broker.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def topic_name(index: int) -> str:
    return f"persistent://public/default/many-{index:06d}"


def reply_of(conn: RawConnection, request_id: int) -> pb.BaseCommand:
    def is_reply(frame: object) -> bool:
        cmd = frame.command  # type: ignore[attr-defined]
        for field in ("producer_success", "success", "error"):
            if cmd.HasField(field) and getattr(cmd, field).request_id == request_id:
                return True
        return False
    return conn.read_until(is_reply, timeout_s=120).command


def create_wave(broker: BrokerProcess, first: int, count: int) -> int:
    """Producer, one message, subscription on each topic; the number of failures."""
    failures = 0
    with RawConnection.to_service(broker.service_url, timeout_s=120) as conn:
        conn.handshake()
        for i in range(count):
            conn.send_command(producer(topic_name(first + i), i, 2 * i))
            conn.send_command(subscribe(topic_name(first + i), "sub", i, 2 * i + 1,
                                        initialPosition=pb.CommandSubscribe.Earliest))
        sent = 0
        for i in range(count):
            ok = reply_of(conn, 2 * i).type == T.PRODUCER_SUCCESS
            ok = reply_of(conn, 2 * i + 1).type == T.SUCCESS and ok
            if ok:
                conn.send_message(i, 0, f"m{first + i}".encode(), producer_name=f"p{first + i}")
                sent += 1
            else:
                failures += 1
        for _ in range(sent):
            if conn.read_until(lambda f: f.command.type in (T.SEND_RECEIPT, T.SEND_ERROR),
                               timeout_s=120).command.type != T.SEND_RECEIPT:
                failures += 1
    return failures


def check_wave(broker: BrokerProcess, first: int, count: int) -> int:
    """Every topic's subscription gets its message, and takes one more; the failures."""
    failures = 0
    with RawConnection.to_service(broker.service_url, timeout_s=120) as conn:
        conn.handshake()
        for i in range(count):
            conn.send_command(subscribe(topic_name(first + i), "sub", i, 2 * i))
            conn.send_command(producer(topic_name(first + i), i, 2 * i + 1))
        for i in range(count):
            ok = reply_of(conn, 2 * i).type == T.SUCCESS
            ok = reply_of(conn, 2 * i + 1).type == T.PRODUCER_SUCCESS and ok
            if ok:
                conn.send_command(flow(i, 1))
                conn.send_message(i, 1, b"again", producer_name=f"c{first + i}")
            else:
                failures += 1
        got = set()
        deadline = time.monotonic() + 120
        expected = count - failures
        while len(got) < expected and time.monotonic() < deadline:
            frame = conn.read_until(lambda f: f.command.type in (T.MESSAGE, T.SEND_ERROR), timeout_s=120)
            if frame.command.type == T.MESSAGE:
                got.add(frame.command.message.consumer_id)
            else:
                failures += 1
                expected -= 1
        failures += expected - len(got)
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=50_000)
    parser.add_argument("--wave", type=int, default=1000)
    parser.add_argument("--nofile", type=int, default=4096)
    parser.add_argument("--idle", type=int, default=2, help="idleTopicUnloadSeconds")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="topics-bench-"))  # removed at the end: 1 to 2 GB at 50,000 topics
    data = scratch / "data"
    broker = BrokerProcess(data, config={"idleTopicUnloadSeconds": str(args.idle)}, open_files_limit=args.nofile)
    broker.start()
    try:
        base_rss, base_fds = rss_mb(broker), broker.open_files()
        started = time.monotonic()
        failures = 0
        peak_fds = base_fds
        first_wave_rss = None
        for first in range(0, args.topics, args.wave):
            count = min(args.wave, args.topics - first)
            failures += create_wave(broker, first, count)
            fds = broker.open_files()
            peak_fds = max(peak_fds, fds)
            if first_wave_rss is None:
                first_wave_rss = rss_mb(broker)
            print(f"created {first + count:>6} topics  fds {fds:>5}  rss {rss_mb(broker):7.1f} MB  "
                  f"failures {failures}", flush=True)
        create_s = time.monotonic() - started
        deadline = time.monotonic() + 10 * args.idle + 30
        while broker.open_files() > base_fds + 20 and time.monotonic() < deadline:
            time.sleep(0.5)
        settled_rss, settled_fds = rss_mb(broker), broker.open_files()
        started = time.monotonic()
        check_failures = 0
        for first in range(0, args.topics, args.wave):
            count = min(args.wave, args.topics - first)
            check_failures += check_wave(broker, first, count)
            peak_fds = max(peak_fds, broker.open_files())
        check_s = time.monotonic() - started
        assert first_wave_rss is not None
        result = {
            "topics": args.topics, "nofile": args.nofile, "idleTopicUnloadSeconds": args.idle,
            "create_failures": failures, "check_failures": check_failures,
            "create_s": round(create_s, 1), "check_s": round(check_s, 1),
            "base_fds": base_fds, "peak_fds": peak_fds, "settled_fds": settled_fds,
            "base_rss_mb": round(base_rss, 1), "settled_rss_mb": round(settled_rss, 1),
            "rss_kb_per_loaded_topic": round((first_wave_rss - base_rss) * 1024 / min(args.wave, args.topics), 1),
            "rss_kb_per_unloaded_topic": round((settled_rss - base_rss) * 1024 / args.topics, 2),
        }
        print(json.dumps(result))
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
