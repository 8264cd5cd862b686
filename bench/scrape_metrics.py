"""Scrape cost of the per-job metrics: ``python -m bench.scrape_metrics [--jobs 1000]``.

The operator's collector (``lorarl.runtime.metrics.JOB_METRICS``'s shape: a SampleCollector over
``jobmetrics.JobMetrics``) over N cached jobs shaped as the operator caches them (running jobs
whole, with 7 conditions and 2 eval sets; a fifth finished, compact), rendered by
prometheus_client's exposition as a scrape of /metrics would. Prints CPU ms per scrape (median
of 20), the body size and the series count; the figure is quoted in docs/benchmarks.md and
docs/observability.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from lorarl.control import jobmetrics
from lorarl.control.cache import compact_job
from lorarl.runtime.metrics import SampleCollector
from prometheus_client import CollectorRegistry, generate_latest

CONDITIONS = ("Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "TrainingHealthy")


def cached_job(i: int, now: float) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60))
    body = {
        "metadata": {"namespace": f"team-{i % 20}", "name": f"job-{i:05d}", "uid": f"u{i}", "generation": 1, "creationTimestamp": stamp},
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "conditions": [{"type": t, "status": "False", "reason": "NoError", "message": "", "lastTransitionTime": stamp} for t in CONDITIONS],
            "progress": {
                "rollout": i % 100,
                "total": 100,
                "percent": i % 100,
                "etaSeconds": 600,
                "lastUpdateTime": stamp,
                "attempts": 1,
                "trainedRollouts": i % 100,
                "gpuHours": 1.25,
            },
            "metrics": {"step": i, "rawReward": 0.61, "trainRolloutLogprobAbsDiff": 0.012, "trainRolloutLogprobAbsDiffMean": 0.0121, "kl": 0.001, "loss": 0.2},
            "eval": [{"name": n, "latest": 0.5, "latestRollout": 39, "best": 0.5, "bestRollout": 39} for n in ("gsm8k", "math")],
            "checkpoints": {"latestIteration": 39, "count": 2},
        },
    }
    if i % 5 == 0:  # a fifth finished a minute ago: compact, inside the finished-metrics window
        body["status"] |= {"phase": "Succeeded", "completionTime": stamp}
        body = compact_job(body)
    return body


def measure(jobs: int, rounds: int = 20) -> dict[str, float]:
    now = time.time()
    cached = [cached_job(i, now) for i in range(jobs)]
    per_job = jobmetrics.JobMetrics(started=now - 3600, finished_seconds=3600)
    collector = SampleCollector()
    collector.bind(lambda: per_job.samples(cached, time.time()), jobmetrics.HELP, jobmetrics.COUNTERS)
    registry = CollectorRegistry()
    registry.register(collector)
    body = generate_latest(registry)
    cpu = []
    for _ in range(rounds):
        began = time.process_time()
        generate_latest(registry)
        cpu.append(time.process_time() - began)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    return {"jobs": jobs, "cpu_ms_median": 1000 * statistics.median(cpu), "cpu_ms_max": 1000 * max(cpu), "bytes": len(body), "series": series}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    for n in parser.parse_args().jobs:
        r = measure(n)
        print(f"{r['jobs']:>6} jobs: {r['cpu_ms_median']:.1f} ms CPU per scrape (max {r['cpu_ms_max']:.1f}), {r['bytes'] / 1024:.0f} KiB, {r['series']} series")


if __name__ == "__main__":
    main()
