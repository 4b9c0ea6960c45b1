"""What an open web console costs a broker with many topics, and how fast its topic list is.

Loads ``--topics`` topics (a producer, a message and a subscription each), then:

- measures a producer's publish round trips (SEND to receipt, one at a time) for
  ``--seconds`` with no console, then as long again with a console open: another process
  follows what the overview, the topics page sorted by rate and the probe topic's page
  show, as the console does: their server-sent events (``--console stream``, the default
  on a broker that serves them), or polling once a second each their REST calls (load
  report, rate history, the topics page sorted by rate, the probe topic's stats:
  ``--console poll``, what a broker without them is asked);
- measures the broker's CPU time per second with that console alone and with no client at
  all, alternated as often: their difference is the console's cost (``console_cpu_ms_per_s``),
  a figure that the other work of a shared machine disturbs less than a latency;
- times the REST calls behind the console's pages (the topics page's first page by name and
  by message rate, the load report, the rate history, a topic's stats), the console's own
  files, and for comparison the cheapest admin call (``brokers/ready``);
- with ``--browser``, times console pages in headless Chromium, from navigation to their
  first rows drawn.

    python bench/console_bench.py --topics 50000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from metrics_bench import publish_latencies, summary  # noqa: E402
from topics_bench import create_wave  # noqa: E402

from magnetar.testing.broker_process import BrokerProcess, start_from_checkout  # noqa: E402

PAGE = "/admin/v2/topics-page"
PROBE = "/admin/v2/persistent/public/default/probe"
#: what an open overview and topic page ask for, each once a second
POLLED = ["/admin/v2/broker-stats/load-report", "/admin/v2/broker-stats/rate-history",
          f"{PAGE}?sort=msgRateIn&order=desc&limit=50", PROBE + "/stats"]


def timed_gets(web_url: str, paths: list[str], times: int) -> dict[str, list[float]]:
    """Milliseconds of each GET, ``times`` times each."""
    out: dict[str, list[float]] = {}
    with httpx.Client(base_url=web_url, timeout=60) as http:
        for path in paths:
            for _ in range(times):
                started = time.perf_counter()
                resp = http.get(path)
                resp.raise_for_status()
                out.setdefault(path, []).append(round((time.perf_counter() - started) * 1000, 1))
    return out


def poll_console(web_url: str, seconds: float) -> int:
    """Poll what an open console polls, once a second, for ``seconds``; the requests made."""
    made = 0
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=web_url, timeout=60) as http:
        while time.monotonic() < deadline:
            tick = time.monotonic()
            for path in POLLED:
                http.get(path).raise_for_status()
                made += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return made


#: what the same pages open as server-sent events, on a broker that has them
STREAMED = ["/admin/v2/console-stream/overview",
            "/admin/v2/console-stream/topics-page?sort=msgRateIn&order=desc&limit=50",
            PROBE + "/console-stream"]


def follow(web_url: str, path: str, deadline: float, events: list[int]) -> None:
    """Read the events of the stream at ``path`` until ``deadline``, opening it again when it
    ends, as the console does; each event read counts one in ``events``."""
    with httpx.Client(base_url=web_url, timeout=httpx.Timeout(60, read=max(1.0, deadline - time.monotonic()))) as http:
        while time.monotonic() < deadline:
            try:
                with http.stream("GET", path) as resp:
                    resp.raise_for_status()
                    for line in resp.iter_lines():
                        if line.startswith("event:"):
                            events.append(1)
                        if time.monotonic() >= deadline:
                            return
            except httpx.ReadTimeout:
                return


def stream_console(web_url: str, seconds: float) -> int:
    """Follow what an open console follows, as server-sent events, for ``seconds``; the events read."""
    deadline = time.monotonic() + seconds
    events: list[int] = []
    readers = [threading.Thread(target=follow, args=(web_url, path, deadline, events)) for path in STREAMED]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    return len(events)


def streams_served(web_url: str) -> bool:
    with httpx.Client(base_url=web_url, timeout=60) as http, http.stream("GET", STREAMED[0]) as resp:
        return resp.status_code == 200


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) the process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publishes(broker: BrokerProcess, seconds: float, console: str | None) -> tuple[dict[str, float], int]:
    """The probe's round trips, and the broker's CPU time per second of the phase
    (``broker_cpu_ms_per_s``: what a console costs, less disturbed than a latency by the
    other work of a shared machine)."""
    cpu_before, started = cpu_seconds(broker.proc.pid), time.monotonic()
    stop = threading.Event()
    latencies: list[tuple[float, float]] = []
    probe = threading.Thread(target=publish_latencies, args=(broker, stop, latencies))
    probe.start()
    polled = 0
    try:
        if console:
            # in another process, so the poller's parsing does not take the probe's interpreter lock
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                polled = pool.apply(stream_console if console == "stream" else poll_console,
                                    (broker.web_url, seconds))
        else:
            time.sleep(seconds)
    finally:
        stop.set()
        probe.join()
    cpu_ms_per_s = (cpu_seconds(broker.proc.pid) - cpu_before) * 1000 / (time.monotonic() - started)
    return {**summary([ms for _, ms in latencies]), "broker_cpu_ms_per_s": round(cpu_ms_per_s, 1)}, polled


def console_cpu(broker: BrokerProcess, seconds: float, console: str | None) -> float:
    """The broker's CPU time per second (ms) over ``seconds`` with no client but the console
    (None: none at all), which the CPU time that the console costs is read off."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(time.sleep, (0,))  # the worker started before the phase begins
        before, started = cpu_seconds(broker.proc.pid), time.monotonic()
        if console:
            pool.apply(stream_console if console == "stream" else poll_console, (broker.web_url, seconds))
        else:
            time.sleep(seconds)
        return round((cpu_seconds(broker.proc.pid) - before) * 1000 / (time.monotonic() - started), 1)


#: console pages timed in a browser with ``--browser``: from navigation to the page drawn
BROWSED = {"topics by rate": ("/topics?sort=msgRateIn&order=desc", "#topic-table tbody tr[data-row]"),
           "topics by name": ("/topics", "#topic-table tbody tr[data-row]"),
           "overview": ("/overview", "#totals [data-field]")}


def browse(web_url: str, times: int) -> dict[str, list[float]]:
    """Milliseconds from opening each of ``BROWSED`` in headless Chromium to its first rows
    drawn, ``times`` times each (a fresh page each time)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
    from console_helpers import chromium_context
    out: dict[str, list[float]] = {}
    with chromium_context() as context:
        for label, (route, drawn) in BROWSED.items():
            for _ in range(times):
                page = context.new_page()
                started = time.perf_counter()
                page.goto(f"{web_url}/console/#{route}")
                page.wait_for_selector(drawn, timeout=60_000)
                out.setdefault(label, []).append(round((time.perf_counter() - started) * 1000, 1))
                page.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="each publish phase")
    parser.add_argument("--rounds", type=int, default=1,
                        help="publish phases without and with a console, alternated this many times each")
    parser.add_argument("--broker-src", help="run the broker of this checkout (its src/) to compare versions")
    parser.add_argument("--console", choices=["auto", "poll", "stream"], default="auto",
                        help="what the console of the publish phases does: poll its REST calls once a second "
                             "each, or follow its pages' server-sent events; auto: stream if the broker serves them")
    parser.add_argument("--browser", action="store_true",
                        help="also time console pages in headless Chromium (tests/e2e/console_helpers.py)")
    args = parser.parse_args()
    if args.topics < 1 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--topics and --rounds must be at least 1 and --seconds above 0")
    scratch = Path(tempfile.mkdtemp(prefix="console-bench-"))
    try:
        broker = start_from_checkout(BrokerProcess(scratch / "data", config={"idleTopicUnloadSeconds": "0"}),
                                     args.broker_src)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        started = time.perf_counter()
        failures = sum(create_wave(broker, first, min(1000, args.topics - first))
                       for first in range(0, args.topics, 1000))
        created_s = time.perf_counter() - started
        with httpx.Client(base_url=broker.web_url, timeout=60) as http:
            # the probe's topic with a subscription, so that it outlives the phases without a publisher
            # (an inactive topic without one is deleted)
            http.put(PROBE).raise_for_status()
            http.put(PROBE + "/subscription/kept").raise_for_status()
        os.sync()  # the creation's writeback is not the console's cost
        mode = args.console if args.console != "auto" else "stream" if streams_served(broker.web_url) else "poll"
        quiet, busy, polled = [], [], 0
        for _ in range(args.rounds):  # alternated, so that a drift of the machine hits both alike
            quiet.append(publishes(broker, args.seconds, console=None)[0])
            figures, requests = publishes(broker, args.seconds, console=mode)
            busy.append(figures)
            polled += requests
        idle, watched = [], []
        for _ in range(args.rounds):
            idle.append(console_cpu(broker, args.seconds, None))
            watched.append(console_cpu(broker, args.seconds, mode))
        # after the publishes: the probe topic polled for its stats exists then
        pages = timed_gets(broker.web_url, [f"{PAGE}?limit=50", *POLLED, "/console/", "/console/console.js",
                                            "/admin/v2/brokers/ready"], 5)
        browsed = browse(broker.web_url, 3) if args.browser else None
        print(json.dumps({"topics": args.topics, "creation_failures": failures, "created_s": round(created_s, 1),
                          "get_ms": pages, "browser_ms": browsed,
                          "publish_without_console": quiet[0] if args.rounds == 1 else quiet,
                          "publish_with_console": busy[0] if args.rounds == 1 else busy,
                          "median_p99_ms": {"without": statistics.median(r["p99_ms"] for r in quiet),
                                            "with": statistics.median(r["p99_ms"] for r in busy)},
                          "broker_cpu_ms_per_s_no_publisher": {"without": idle, "with": watched},
                          "console_cpu_ms_per_s": round(statistics.median(watched) - statistics.median(idle), 1),
                          "median_broker_cpu_ms_per_s": {
                              "without": statistics.median(r["broker_cpu_ms_per_s"] for r in quiet),
                              "with": statistics.median(r["broker_cpu_ms_per_s"] for r in busy)},
                          "console": mode, "console_requests" if mode == "poll" else "console_events": polled,
                          "load_avg_1m": os.getloadavg()[0]}))
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
