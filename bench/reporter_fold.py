"""The in-job reporter's cost per log line as a run grows: CPU seconds to fold miles' log of a
run of 1,000, 3,000 and 10,000 rollouts (lorarl_dev.mileslog writes the lines miles prints) into
the status, and per 1,000 lines. Flat per-line cost means the reporter keeps up at any length.

    .venv/bin/python -m bench.reporter_fold [--rollouts 1000,3000,10000]
"""

from __future__ import annotations

import argparse
import os
import time

from lorarl.reporter.logparse import parse_line
from lorarl.reporter.summary import Summary
from lorarl_dev import mileslog


def fold_seconds(num_rollouts: int) -> tuple[int, float]:
    log = mileslog.attempt_log(num_rollouts, save_dir="/root/shared_data/bench/checkpoints", eval_interval=20, save_interval=50, seed=20261202)
    summary = Summary(num_rollouts, clock=lambda: 0.0)
    started = time.process_time()
    for line in log.lines:
        for segment in line.rstrip(b"\n").split(b"\r"):
            event = parse_line(segment)
            if event is not None:
                summary.apply(event)
    summary.status()
    return len(log.lines), time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", default="1000,3000,10000", help="comma-separated run lengths")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    print("| rollouts | log lines | CPU s | CPU ms per 1,000 lines |")
    print("|---:|---:|---:|---:|")
    for n in (int(x) for x in args.rollouts.split(",")):
        lines, seconds = fold_seconds(n)
        print(f"| {n:,} | {lines:,} | {seconds:.2f} | {1e6 * seconds / lines:.0f} |")


if __name__ == "__main__":
    main()
