"""Command line: run schedules by seed, print failures as replayable schedules."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from magnetar.testing.sim.broker_schedules import main as broker_main
from magnetar.testing.sim.cluster_schedules import main as cluster_main
from magnetar.testing.sim.options import ALL_TYPES, parse_type_mix
from magnetar.testing.sim.runner import RunResult, read_schedule_file, run

TypeMix = tuple[tuple[str, float], ...]


def _run_one(args: tuple[int, int | None, dict[str, str], TypeMix]) -> RunResult:
    seed, steps, overrides, types = args
    return run(seed, steps, overrides=overrides, types=types)


def _results(first: int, count: int, steps: int | None, jobs: int,
             overrides: dict[str, str], types: TypeMix) -> Iterator[RunResult]:
    work = [(seed, steps, overrides, types) for seed in range(first, first + count)]
    if jobs <= 1:
        yield from map(_run_one, work)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(_run_one, work, chunksize=64)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:  # the broker-wide simulation (broker_schedules)
        return broker_main(argv[1:])
    if argv[:1] == ["cluster"]:  # several brokers over one store and shared files (cluster_schedules)
        return cluster_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m magnetar.testing.sim", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="first seed (random when omitted)")
    parser.add_argument("--schedules", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--steps", type=int, default=None, help="safety steps per schedule (default: from seed)")
    parser.add_argument("--schedule", type=Path, default=None,
                        help="replay a printed schedule (its recorded options, else those of --seed)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--verbose", action="store_true", help="print every schedule, not only failures")
    parser.add_argument("--trace", action="store_true", help="show each step's deliveries (one schedule)")
    parser.add_argument("--types", type=parse_type_mix, default=ALL_TYPES,
                        metavar="TYPE[=WEIGHT],...",
                        help="subscription types the seeds draw from, e.g. Shared,Key_Shared=2 "
                             "(default: all four, equally)")
    parser.add_argument("--set", action="append", default=[], metavar="OPTION=VALUE",
                        help="force an option in every schedule, e.g. --set classic=true")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    types_text = "" if args.types == ALL_TYPES else " --types " + ",".join(f"{t}={w:g}" for t, w in args.types)
    print(f"seed {seed}{types_text}" + "".join(f" --set {item}" for item in args.set), flush=True)
    if args.schedule is not None or args.trace:
        options, schedule = read_schedule_file(args.schedule.read_text()) if args.schedule is not None \
            else (None, None)
        result = run(seed, args.steps, schedule=schedule, trace_events=args.trace, overrides=overrides,
                     options=options, types=args.types)
        _report(result, verbose=True)
        return 0 if result.ok else 1
    started = time.monotonic()
    failures = 0
    deliveries = 0
    coverage: dict[str, int] = {}
    for result in _results(seed, args.schedules, args.steps, args.jobs, overrides, args.types):
        deliveries += result.deliveries
        for key, count in result.coverage.items():
            coverage[key] = coverage.get(key, 0) + count
        if not result.ok:
            failures += 1
        if not result.ok or args.verbose:
            _report(result, verbose=True)
    summary = {"first_seed": seed, "schedules": args.schedules, "violations": failures,
               "deliveries": deliveries, "coverage": coverage, "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(summary), flush=True)
    return 0 if failures == 0 else 1


def _report(result: RunResult, verbose: bool) -> None:
    status = "ok" if result.ok else f"VIOLATION at step {result.failed_step}: {result.violation}"
    print(f"seed {result.options.seed}: {status} ({result.published} published, {result.deliveries} deliveries)")
    if verbose:
        print(result.schedule_text())
        print(f"# replay: python -m magnetar.testing.sim --seed {result.options.seed} "
              f"--set sub_type={result.options.sub_type}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
