"""The ``churn`` phase: one tenant's edits against another tenant's new jobs (issue 19, finding 10).

    .venv/bin/python -m bench --phases churn                        # this tree's operator
    .venv/bin/python -m bench --phases churn --baseline main        # and main's, for before/after

One operator (``lorarl run -n churn-a -n churn-b``, its defaults) watches two namespaces, two
tenants. Tenant A has 10 settled jobs and patches ``spec.runPolicy.startupTimeoutSeconds``
(a field that changes no child's render) on them in turn, ~10 edits a second for ~25 s; meanwhile
tenant B creates a new job every second. Measured (the operator's requests from the API
server's audit log, by namespace; tenant B's latency from this process's watch):

* child applies per second in tenant A (server-side applies of its six kinds of children);
* the operator's writes in tenant A per edit (children, status, Events);
* tenant B's create-to-RayJob latency, median and p90, during the churn, and of 5 jobs created
  before it (no churn).

``--baseline REF`` runs the same first with the operator of git revision REF (``git archive``
of its ``operator/`` put first on PYTHONPATH), in namespaces of its own on the same control plane.
Not a test: nothing asserts a figure. They go to ``OUT`` (docs/benchmarks-churn.json by default)
and are printed; docs/benchmarks.md quotes them by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.kuberay import kuberay_crd_path

from . import report
from .kclient import Client, path
from .measure import percentile
from .run import CHILDREN, Bench, Plan, log, machine
from .systems import stop_all
from .workload import JOB, Tracker, lorarl_job

REPO = pathlib.Path(__file__).resolve().parents[1]
JOBS_A = 10
EDITS_PER_S = 10.0
SECONDS = 25.0
B_EVERY = 1.0  # seconds between tenant B's new jobs
B_QUIET = 5  # tenant B's jobs created before the churn


def checkout(ref: str, into: pathlib.Path) -> pathlib.Path:
    """``operator/`` of git revision ``ref``, unpacked under ``into``: its PYTHONPATH entry."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "operator"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "operator"


async def created_to_rayjob(client: Client, bench: Bench, ns: str, tracker: Tracker, start: int, count: int, every: float, t0: float) -> dict[str, float]:
    """Create ``count`` jobs in ``ns``, one each ``every`` seconds from ``t0``: name -> when sent."""
    sent: dict[str, float] = {}

    async def one(k: int) -> None:
        await asyncio.sleep(max(0.0, t0 + k * every - time.monotonic()))
        obj = lorarl_job(ns, start + k)
        sent[obj["metadata"]["name"]] = time.monotonic()
        await client.create(obj)

    await asyncio.gather(*(one(k) for k in range(count)))
    return sent


async def churn_run(bench: Bench, client: Client, label: str, pythonpath: pathlib.Path | None) -> dict[str, Any]:
    a, b = f"churn-a{label}", f"churn-b{label}"
    for ns in (a, b):
        await bench.new_namespace(client, ns)
    ours = bench.system("ours", extra_args=("-n", b))
    if pythonpath is not None:
        ours.extra_env = {"PYTHONPATH": str(pythonpath)}
    sysm = await asyncio.to_thread(ours.start, a)
    tasks: list[asyncio.Task] = []
    try:
        tracker_a, tracker_b = Tracker(("status", "child")), Tracker(("child",))
        tasks = await bench.watches(client, "ours", a, tracker_a) + await bench.watches(client, "ours", b, tracker_b)
        await bench.create_all(client, [lorarl_job(a, i) for i in range(JOBS_A)])
        await tracker_a.wait(lambda: tracker_a.done_count >= JOBS_A, 120, lambda: f"tenant A: {tracker_a.done_count}/{JOBS_A} jobs reconciled")
        await bench.quiet(sysm.user)

        # tenant B alone: its new jobs' latency without churn
        quiet_sent = await created_to_rayjob(client, bench, b, tracker_b, 0, B_QUIET, B_EVERY, time.monotonic())
        await tracker_b.wait(lambda: tracker_b.done_count >= B_QUIET, 120, lambda: f"tenant B: {tracker_b.done_count}/{B_QUIET} RayJobs")
        await bench.quiet(sysm.user)

        # the churn in A, tenant B's new jobs meanwhile
        edits = int(EDITS_PER_S * SECONDS)
        n_b = int(SECONDS / B_EVERY)
        audit_from = bench.audit.poll()
        cpu0 = sysm.meter.cpu_seconds()
        t0 = time.monotonic()

        async def edit(k: int) -> None:
            await asyncio.sleep(max(0.0, t0 + k / EDITS_PER_S - time.monotonic()))
            patch = {"spec": {"runPolicy": {"startupTimeoutSeconds": 1800 + k}}}
            await client.request("PATCH", path(*JOB, a, lorarl_job(a, k % JOBS_A)["metadata"]["name"]), patch, "application/merge-patch+json")

        edits_task = asyncio.gather(*(edit(k) for k in range(edits)))
        churn_sent = await created_to_rayjob(client, bench, b, tracker_b, B_QUIET, n_b, B_EVERY, t0 + 0.5)
        await edits_task
        churn_seconds = time.monotonic() - t0
        await tracker_b.wait(lambda: tracker_b.done_count >= B_QUIET + n_b, 180, lambda: f"tenant B: {tracker_b.done_count}/{B_QUIET + n_b} RayJobs")
        await bench.quiet(sysm.user, seconds=5, timeout=300)  # the operator has caught up with every edit
        reqs = bench.audit.between(audit_from, bench.audit.poll(), sysm.user)
        writes_a = [r for r in reqs if r.write and r.namespace == a]
        applies_a = [r for r in writes_a if r.verb == "patch" and r.resource in CHILDREN]
        quiet_lat = [tracker_b.done_at(n) - at for n, at in quiet_sent.items()]
        churn_lat = [tracker_b.done_at(n) - at for n, at in churn_sent.items()]
        out = {
            "edits": edits,
            "churn_seconds": churn_seconds,
            "child_applies_a": len(applies_a),
            "child_applies_a_per_s": len(applies_a) / churn_seconds,
            "writes_a": len(writes_a),
            "writes_a_by_resource": {res: sum(1 for r in writes_a if r.resource == res) for res in sorted({r.resource for r in writes_a})},
            "writes_per_edit": len(writes_a) / edits,
            "b_quiet_median_s": percentile(quiet_lat, 50),
            "b_churn_median_s": percentile(churn_lat, 50),
            "b_churn_p90_s": percentile(churn_lat, 90),
            "b_churn_max_s": max(churn_lat),
            "b_churn_latencies": sorted(churn_lat),
            "operator_cpu_s": sysm.meter.cpu_seconds() - cpu0,
            "load": os.getloadavg(),
        }
        log(
            f"churn{label or ''}: {out['child_applies_a_per_s']:.1f} child applies/s in A ({out['child_applies_a']}), "
            f"{out['writes_per_edit']:.2f} writes/edit, tenant B median {out['b_churn_median_s']:.2f}s p90 {out['b_churn_p90_s']:.2f}s "
            f"(without churn {out['b_quiet_median_s']:.2f}s)"
        )
        return out
    finally:
        await bench.tear_down(client, a, sysm, tasks)


async def measure(cp: ControlPlane, workdir: pathlib.Path, baseline: pathlib.Path | None, rounds: int) -> dict[str, Any]:
    plan = Plan(
        sizes=[], steady_rate=0, steady_seconds=0, idle_seconds=0, history_jobs=0, history_idle_seconds=0, settled_jobs=0, systems=("ours",), phases=("churn",)
    )
    bench = Bench(cp, plan, workdir)
    out: dict[str, Any] = {"before": [], "after": []}
    async with Client(str(cp.kubeconfig), 48, user_agent="lorarl-bench-driver") as client:
        for round_ in range(rounds):  # interleaved, so that a busy spell of the machine weighs on both
            if baseline is not None:
                out["before"].append(await churn_run(bench, client, f"-before-{round_ + 1}", baseline))
            out["after"].append(await churn_run(bench, client, f"-after-{round_ + 1}", None))
    return out


def summary(r: dict[str, Any]) -> str:
    lines = []
    for which in ("before", "after"):
        for run in r.get(which) or []:
            lines.append(
                f"{which}: child applies in A {run['child_applies_a_per_s']:.1f}/s ({run['child_applies_a']} in {run['churn_seconds']:.0f} s), "
                f"operator writes per edit {run['writes_per_edit']:.2f}, tenant B create-to-RayJob during churn median "
                f"{run['b_churn_median_s']:.2f} s p90 {run['b_churn_p90_s']:.2f} s (no churn: median {run['b_quiet_median_s']:.2f} s)"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench --phases churn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="also run the operator of this git revision (e.g. main), for before/after")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each (interleaved)")
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks-churn.json")
    args = parser.parse_args(argv)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="lorarl-churn-"))
    baseline = checkout(args.baseline, workdir) if args.baseline else None
    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    try:
        with ControlPlane() as cp:
            cp.install_crds([kuberay_crd_path("RayService")])
            log(f"control plane up ({cp.version}) for churn; logs in {workdir}")
            r = asyncio.run(measure(cp, workdir, baseline, args.rounds))
            r["kubernetes"] = cp.version
    finally:
        stop_all()
    r.update(
        command=report.neutral_command("python -m bench --phases churn " + " ".join(argv if argv is not None else sys.argv[1:])),
        started=started.isoformat(timespec="seconds"),
        baseline=args.baseline,
        plan={"jobs_a": JOBS_A, "edits_per_s": EDITS_PER_S, "seconds": SECONDS, "b_every_s": B_EVERY, "b_quiet_jobs": B_QUIET},
        machine=machine(),
        load_before=load_before,
        load_after=os.getloadavg(),
    )
    args.out.write_text(json.dumps(r, indent=1, sort_keys=True) + "\n")
    print(summary(r))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
