#!/usr/bin/env python3
"""Benchmark: how fast the operator turns N LoraRLJobs into RayJobs on the real control plane,
and what one render costs. Prints figures; with --write, records them in docs/benchmarks.md.

    .venv/bin/python bench/reconcile_scale.py --jobs 50 [--write]

Not a test: nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import pathlib
import platform
import re
import signal
import statistics
import subprocess
import sys
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from lorarl import render  # noqa: E402
from lorarl.kube import Api  # noqa: E402
from lorarl_dev.controlplane import ControlPlane  # noqa: E402
from lorarl.validation import parse_job  # noqa: E402


def bench_render(n: int) -> tuple[float, float]:
    doc = yaml.safe_load((REPO / "manifests" / "qwen3-4b-lora-amd.yaml").read_text())
    start = time.perf_counter()
    for i in range(n):
        d = copy.deepcopy(doc)
        d["metadata"]["name"] = f"job-{i}"
        parse_job(d)
    parse_ms = (time.perf_counter() - start) / n * 1000
    job = parse_job(doc)
    start = time.perf_counter()
    for _ in range(n):
        render.to_yaml(render.render(job))
    return parse_ms, (time.perf_counter() - start) / n * 1000


def bench_operator(jobs: int) -> dict[str, float]:
    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", "bench")
        log = open("/tmp/lorarl-bench-operator.log", "wb")
        op = subprocess.Popen(
            [sys.executable, "-m", "lorarl.cli", "run", "-n", "bench", "--liveness", "", "--metrics-port", "0",
             "--resync-seconds", "30", "--log-format", "plain"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **cp.env()}, start_new_session=True,
        )
        try:
            time.sleep(3)  # let kopf start watching
            doc = yaml.safe_load((REPO / "manifests" / "qwen3-4b-lora-amd.yaml").read_text())
            docs = []
            for i in range(jobs):
                d = copy.deepcopy(doc)
                d["metadata"].update(name=f"job-{i:03d}", namespace="bench")
                docs.append(d)
            kube = Api(cp.api_client())
            t0 = time.monotonic()
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=600)
            applied = time.monotonic() - t0
            seen: dict[str, float] = {}
            while len(seen) < jobs and time.monotonic() - t0 < 600:
                for item in kube.list("lorarl.dev/v1alpha1", "LoraRLJob", "bench"):
                    name = item["metadata"]["name"]
                    if name not in seen and (item.get("status") or {}).get("phase") == "Pending":
                        seen[name] = time.monotonic() - t0
                time.sleep(0.2)
            rayjobs = kube.list("ray.io/v1", "RayJob", "bench")
            latencies = sorted(seen.values())
            return {
                "jobs": jobs,
                "kubectl_apply_s": applied,
                "all_converged_s": latencies[-1] if latencies else float("nan"),
                "median_converge_s": statistics.median(latencies) if latencies else float("nan"),
                "throughput_jobs_per_s": jobs / latencies[-1] if latencies else float("nan"),
                "rayjobs": len(rayjobs),
                "converged": len(seen),
            }
        finally:
            os.killpg(op.pid, signal.SIGTERM)
            op.wait(timeout=30)
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--renders", type=int, default=200)
    parser.add_argument("--write", action="store_true", help="record the figures in docs/benchmarks.md")
    args = parser.parse_args()

    parse_ms, render_ms = bench_render(args.renders)
    print(f"validate (schema + CEL + semantics): {parse_ms:.2f} ms/job; render + YAML: {render_ms:.2f} ms/job")
    op = bench_operator(args.jobs)
    for key, value in op.items():
        print(f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}")

    if args.write:
        row = (f"| {datetime.date.today()} | {platform.machine()}, {os.cpu_count()} cores | {op['jobs']} | "
               f"{op['kubectl_apply_s']:.1f} s | {op['median_converge_s']:.1f} s | {op['all_converged_s']:.1f} s | "
               f"{op['throughput_jobs_per_s']:.1f} | {op['rayjobs']} | {parse_ms:.1f} ms | {render_ms:.1f} ms |")
        path = REPO / "docs" / "benchmarks.md"
        text = path.read_text()
        path.write_text(re.sub(r"(<!-- results -->\n)", r"\1" + row.replace("\\", "\\\\") + "\n", text, count=1))
        print(f"recorded in {path}")


if __name__ == "__main__":
    main()
