#!/usr/bin/env python3
"""The controller core's costs on the embedded control plane: N LoraRLJobs created at once (8
writer threads) -> seconds until every job is Pending with a RayJob; the operator's requests per
job by verb and resource (the API server's audit log; the operator's and this script's Python
clients share a user agent, so this script's own creates and polling LISTs show up as
"create lorarljobs" 1.0 and "list ..." ~0.15 per job); then an idle window: the operator's CPU
and requests; peak RSS (VmHWM). Not a test: nothing is asserted.

    .venv/bin/python bench/core_requests.py --jobs 200 [--idle 30] [--pythonpath OTHER_TREE/operator]
"""

import argparse
import collections
import copy
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
from lorarl_dev.controlplane import ControlPlane

LOG = "/tmp/lorarl-core-requests-operator.log"


def cpu_seconds(pid):
    total = 0.0
    for p in [pid] + [int(c) for c in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024


def op_requests(path, since_line=0):
    out = collections.Counter()
    n = 0
    with open(path) as f:
        for i, line in enumerate(f):
            n = i + 1
            if i < since_line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("stage") != "ResponseComplete":
                continue
            ua = e.get("userAgent", "")
            if ua.startswith("kubectl") or "bench" not in (e.get("objectRef") or {}).get("namespace", "bench"):
                continue
            if e.get("verb") == "watch" or ua.startswith("kube-"):
                continue
            ref = e.get("objectRef") or {}
            res = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
            out[(e["verb"], res)] += 1
    return out, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--idle", type=float, default=30)
    ap.add_argument("--pythonpath", default="")
    ap.add_argument("--resync", default="30")
    ap.add_argument("--workers", default=None, help="the operator's --workers (an operator without the flag: leave unset)")
    args = ap.parse_args()
    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", "bench")
        logp = open(LOG, "wb")
        env = {**os.environ, **cp.env()}
        if args.pythonpath:
            env["PYTHONPATH"] = args.pythonpath
        op = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lorarl.cli",
                "run",
                "-n",
                "bench",
                "--liveness",
                "",
                "--metrics-port",
                "0",
                "--resync-seconds",
                args.resync,
                "--log-format",
                "plain",
                *(["--workers", args.workers] if args.workers else []),
            ],
            stdout=logp,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            time.sleep(4)
            doc = yaml.safe_load((REPO / "manifests" / "qwen3-4b-lora-amd.yaml").read_text())
            docs = []
            for i in range(args.jobs):
                d = copy.deepcopy(doc)
                d["metadata"].update(name=f"job-{i:04d}", namespace="bench")
                docs.append(d)
            _, start_line = op_requests(cp.audit_log_path)
            cpu0 = cpu_seconds(op.pid)
            import queue as q_
            import threading

            from lorarl.runtime.kube import Api, path

            kube = Api(cp.api_client())
            work = q_.Queue()
            for d in docs:
                work.put(d)

            def creator():
                k = Api(cp.api_client())
                while True:
                    try:
                        d = work.get_nowait()
                    except q_.Empty:
                        return
                    k._call("POST", path("lorarl.dev/v1alpha1", "LoraRLJob", "bench"), body=d)

            t0 = time.monotonic()
            ts = [threading.Thread(target=creator) for _ in range(8)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            applied = time.monotonic() - t0
            done = 0
            while time.monotonic() - t0 < 600:
                items = kube.list("lorarl.dev/v1alpha1", "LoraRLJob", "bench")
                rjs = kube.list("ray.io/v1", "RayJob", "bench")
                done = sum(1 for it in items if (it.get("status") or {}).get("phase") == "Pending" and (it.get("status") or {}).get("observedGeneration"))
                if done == args.jobs and len(rjs) == args.jobs:
                    break
                time.sleep(0.25)
            conv = time.monotonic() - t0
            # settle: 10 s more for the tail (second passes etc.)
            time.sleep(10)
            create_reqs, mid_line = op_requests(cp.audit_log_path, start_line)
            cpu1 = cpu_seconds(op.pid)
            time.sleep(args.idle)
            idle_reqs, _ = op_requests(cp.audit_log_path, mid_line)
            cpu2 = cpu_seconds(op.pid)
            res = {
                "jobs": args.jobs,
                "create_all_s": round(applied, 2),
                "all_converged_s": round(conv, 2),
                "jobs_per_s": round(args.jobs / conv, 1),
                "create_path_cpu_s": round(cpu1 - cpu0, 2),
                "create_requests_per_job": {f"{v} {r}": round(c / args.jobs, 2) for (v, r), c in sorted(create_reqs.items())},
                "idle_window_s": args.idle,
                "idle_cpu_pct": round(100 * (cpu2 - cpu1) / args.idle, 2),
                "idle_requests": {f"{v} {r}": c for (v, r), c in sorted(idle_reqs.items())},
                "peak_rss_mib": round(rss_mib(op.pid), 1),
                "reconcile_lines": open(LOG, errors="replace").read().count("] reconcile "),
            }
            print(json.dumps(res, indent=1))
        finally:
            os.killpg(op.pid, signal.SIGTERM)
            op.wait(timeout=30)
            logp.close()


main()
