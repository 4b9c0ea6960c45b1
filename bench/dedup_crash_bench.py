"""Crash trials: 100,000 messages, >= 5 SIGKILLs each, 10 trials; prints one JSON line per trial.

Usage: python bench/dedup_crash_bench.py [--trials 10] [--messages 100000] [--kills 5] [--batching]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from magnetar.testing.dedup_crash import run_trial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--batching", action="store_true")
    args = parser.parse_args()
    for trial in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            result = run_trial(Path(tmp) / "data", args.messages, args.kills, seed=trial, batching=args.batching)
        row = asdict(result)
        row["trial"] = trial
        row["recovery_s"] = [round(r, 3) for r in result.recovery_s]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
