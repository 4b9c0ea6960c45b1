"""What a ``/metrics`` scrape costs a broker with many loaded topics.

Loads ``--topics`` topics (a producer, a message and a subscription each; idle topics are
kept loaded), then measures a producer's publish round trips (SEND to receipt, one at a
time) with no scrape running and while ``--scrapes`` scrapes run back to back. Prints the
scrape time and size, and the publish p50/p99/max in both phases: the longest the event
loop was held shows as the max.

    python bench/metrics_bench.py --topics 50000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from topics_bench import create_wave  # noqa: E402

from magnetar.testing.broker_process import BrokerProcess, checkout_source  # noqa: E402
from magnetar.testing.raw_client import RawConnection, T  # noqa: E402


def publish_latencies(broker: BrokerProcess, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """(start on the monotonic clock, round trip in ms) of each publish, one at a time."""
    with RawConnection.to_service(broker.service_url, timeout_s=60) as conn:
        conn.handshake()
        conn.create_producer("persistent://public/default/probe", producer_id=1, request_id=1)
        seq = 0
        while not stop.is_set():
            started = time.perf_counter()
            conn.send_message(1, seq, b"x" * 100)
            conn.expect(T.SEND_RECEIPT)
            out.append((started, (time.perf_counter() - started) * 1000))
            seq += 1


#: a scrape: (start and end on the monotonic clock, which all processes share; bytes)
Scraped = tuple[float, float, int]


def scrape_with_curl(web_url: str, times: int) -> list[Scraped]:
    """As ``scrape``, with curl: a scraper that spends little CPU reading, as Prometheus
    does, where httpx's chunk decoding takes most of a core of the two."""
    scraped = []
    for _ in range(times):
        started = time.perf_counter()
        out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}", f"{web_url}/metrics"],
                             check=True, capture_output=True, text=True).stdout
        scraped.append((started, time.perf_counter(), int(out)))
    return scraped


def scrape(web_url: str, times: int) -> list[Scraped]:
    """Scrape ``times`` times back to back."""
    scraped = []
    with httpx.Client(timeout=600) as http:
        for _ in range(times):
            started = time.perf_counter()
            body = http.get(f"{web_url}/metrics").content
            scraped.append((started, time.perf_counter(), len(body)))
    return scraped


def during(latencies: list[tuple[float, float]], scraped: list[Scraped]) -> list[float]:
    """The round trips of publishes started while a scrape ran: the scraping process's
    own start (an interpreter and its imports, half a second of CPU) is not a scrape."""
    return [ms for started, ms in latencies if any(begin <= started < end for begin, end, _ in scraped)]


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {"count": len(ordered), "p50_ms": round(ordered[len(ordered) // 2], 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2)}


def measure(broker: BrokerProcess, seconds: float, scrapes: int,
            scraper: str = "httpx") -> tuple[dict[str, float], list[Scraped]]:
    stop = threading.Event()
    latencies: list[tuple[float, float]] = []
    probe = threading.Thread(target=publish_latencies, args=(broker, stop, latencies))
    probe.start()
    scraped: list[Scraped] = []
    try:
        if scrapes:
            # in another process: reading 80 MB in this one would take the interpreter lock
            # from the probe, and its waits would be counted as the broker's
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                scraped = pool.apply(scrape_with_curl if scraper == "curl" else scrape, (broker.web_url, scrapes))
        else:
            time.sleep(seconds)
    finally:
        stop.set()
        probe.join()
    return summary(during(latencies, scraped) if scrapes else [ms for _, ms in latencies]), scraped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--scraper", choices=["httpx", "curl"], default="httpx",
                        help="what scrapes: httpx in Python, or curl (little CPU, as Prometheus)")
    parser.add_argument("--broker-src", help="run the broker of this checkout (its src/) to compare versions")
    args = parser.parse_args()
    try:
        source = checkout_source(args.broker_src) if args.broker_src else None
    except ValueError as exc:
        parser.error(str(exc))

    scratch = Path(tempfile.mkdtemp(prefix="metrics-bench-"))  # removed at the end: 1 to 2 GB at 50,000 topics
    data = scratch / "data"
    broker = BrokerProcess(data, config={"idleTopicUnloadSeconds": "0"})
    if source is not None:
        os.environ["PYTHONPATH"] = source
    broker.start()
    try:
        for first in range(0, args.topics, 1000):
            create_wave(broker, first, min(1000, args.topics - first))
        # the kernel writes the new topics' files back over the next half minute, and a
        # publish's fdatasync waits behind that (30 to 100 ms): flushed first, so the phases
        # below measure the scrape rather than the creation's writeback
        os.sync()
        quiet, _ = measure(broker, 5.0, 0)
        if args.scraper == "curl" and shutil.which("curl") is None:
            parser.error("--scraper curl: no curl on PATH")
        busy, scraped = measure(broker, 0, args.scrapes, args.scraper)
        print(json.dumps({
            "topics": args.topics, "scraper": args.scraper,
            "scrape_s": [round(end - begin, 2) for begin, end, _ in scraped],
            "scrape_mb": round(scraped[0][2] / 1e6, 1) if scraped else 0,
            "publish_without_scrape": quiet, "publish_during_scrapes": busy,
        }))
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
