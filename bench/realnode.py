"""The ``realnode`` phase: the timeline of one real seed run on the real node, and the seconds
lorarl adds to a run's start.

    .venv/bin/python -m bench --phases realnode       # (or python -m bench.realnode)

1. The seed LoraRLJob (node overrides: lorarl_dev.seedrun.seed_job) applied to the helm-installed
   operator: seconds from the apply to the RayJob, the head pod, its scheduling, the end of the
   init container, Ray up (the head's Ready condition), the submitter Job, the first status
   report and Succeeded.
2. The same objects rendered by ``lorarl render`` and applied with kubectl, no LoraRLJob and no
   operator: seconds from the apply to the head pod and the rest of the start.

The difference in "apply -> head pod created" is what lorarl adds to a run's start (goal < 1 s).
Times of the pod's own steps come from object timestamps (seconds); the apply-relative ones
from this process's watch of the API (receipt time), the same clock for both runs.
Not a test: nothing asserts a duration. The figures go into docs/benchmarks.md between the
``<!-- realnode -->`` marks (kept across the other phases' runs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from lorarl_dev import hubstub, seedrun
from lorarl_dev.controlplane import ControlPlane

REPO = pathlib.Path(__file__).resolve().parents[1]
MARK_BEGIN, MARK_END = "<!-- realnode -->", "<!-- /realnode -->"


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Watcher:
    """Polls a namespace every 0.1 s and records when each milestone was first seen."""

    def __init__(self, cp: ControlPlane, ns: str, name: str) -> None:
        from kubernetes import client

        self.cp, self.ns, self.name = cp, ns, name
        self.api = cp.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.seen: dict[str, float] = {}
        self.last: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()

    def _mark(self, key: str, cond: bool) -> None:
        if cond and key not in self.seen:
            self.seen[key] = time.time()

    def _run(self) -> None:
        from kubernetes.client.rest import ApiException

        while not self._stop.is_set():
            try:
                rj = self.custom.list_namespaced_custom_object("ray.io", "v1", self.ns, "rayjobs")["items"]
                self._mark("rayjob", bool(rj))
                if rj:
                    self.last["rayjob"] = rj[0]
                    st = rj[0].get("status", {})
                    self._mark("ray_job_running", st.get("jobStatus") == "RUNNING")
                    self._mark("ray_job_succeeded", st.get("jobStatus") == "SUCCEEDED")
                pods = self.core.list_namespaced_pod(self.ns).items
                heads = [p for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
                self._mark("head_pod", bool(heads))
                if heads:
                    self.last["head"] = self.api.sanitize_for_serialization(heads[0])
                jobs = self.batch.list_namespaced_job(self.ns).items
                self._mark("submitter_job", bool(jobs))
                try:
                    lj = self.custom.get_namespaced_custom_object("lorarl.dev", "v1alpha1", self.ns, "lorarljobs", self.name)
                    self.last["lorarljob"] = lj
                    st = lj.get("status", {})
                    self._mark("first_report", bool(st.get("progress", {}).get("lastUpdateTime")))
                    self._mark("succeeded", st.get("phase") == "Succeeded")
                except ApiException:
                    pass
            except Exception as exc:  # noqa: BLE001 - a slow API server: try again
                self.last["error"] = repr(exc)
            self._stop.wait(0.1)


def _pod_steps(head: dict[str, Any] | None) -> dict[str, float | None]:
    """The head pod's own timestamps (seconds since the epoch)."""
    if not head:
        return {}
    st = head.get("status", {})
    conds = {c["type"]: c.get("lastTransitionTime") for c in st.get("conditions", [])}
    init = next((s for s in st.get("initContainerStatuses", []) if s["name"] == "prepare"), {})
    term = init.get("state", {}).get("terminated", {}) or init.get("lastState", {}).get("terminated", {})
    return {
        "pod_created": _ts(head["metadata"].get("creationTimestamp")),
        "pod_scheduled": _ts(conds.get("PodScheduled")),
        "init_started": _ts(term.get("startedAt")),
        "init_done": _ts(term.get("finishedAt")),
        "ray_up": _ts(conds.get("Ready")),
    }


def run_one(cp: ControlPlane, job: dict[str, Any], *, by_hand: bool, timeout: float = 900) -> dict[str, Any]:
    ns = job["metadata"]["namespace"]
    name = job["metadata"]["name"]
    cp.kubectl("create", "namespace", ns)
    if by_hand:
        rendered = subprocess.run(
            [str(pathlib.Path(sys.executable).with_name("lorarl")), "render", "-f", "-", "-n", ns, "--full"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    watcher = Watcher(cp, ns, name).start()
    t_apply = time.time()
    try:
        cp.kubectl("apply", "-f", "-", input=rendered if by_hand else json.dumps(job))
        done = "ray_job_succeeded" if by_hand else "succeeded"
        deadline = time.monotonic() + timeout
        while done not in watcher.seen and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        watcher.stop()
    steps = {k: v - t_apply for k, v in watcher.seen.items()}
    pod = {k: (v - t_apply if v is not None else None) for k, v in _pod_steps(watcher.last.get("head")).items()}
    rj = watcher.last.get("rayjob", {}).get("status", {})
    lj = watcher.last.get("lorarljob", {}).get("status", {})
    return {
        "namespace": ns,
        "by_hand": by_hand,
        "watched": steps,
        "pod": pod,
        "ray_job_start": (_ts(rj.get("startTime")) or t_apply) - t_apply if rj.get("startTime") else None,
        "ray_job_end": (_ts(rj.get("endTime")) - t_apply) if rj.get("endTime") else None,
        "job_status": rj.get("jobStatus"),
        "phase": lj.get("phase"),
        "gpu_hours": lj.get("progress", {}).get("gpuHours"),
        "timed_out": done not in watcher.seen,
    }


def measure(rounds: int = 1) -> dict[str, Any]:
    t0, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lorarl-bench-hub-") as hub_root:
        hubstub.make_seed_repos(hub_root)
        with ControlPlane(node=True, gpus=16, kuberay_operator=True) as cp:
            node_start = time.monotonic() - t0
            endpoint = seedrun.start_hub(cp, pathlib.Path(hub_root))
            t = time.monotonic()
            refs = seedrun.import_images(cp)
            images_s = time.monotonic() - t
            t = time.monotonic()
            seedrun.install_operator(cp, refs["operator"], replicas=1)
            install_s = time.monotonic() - t
            runs = []
            for _ in range(rounds):
                for by_hand in (False, True):
                    ns = f"bench-{'hand' if by_hand else 'lorarl'}-{uuid.uuid4().hex[:5]}"
                    job = seedrun.seed_job(image=refs["job"], endpoint=endpoint, namespace=ns)
                    runs.append(run_one(cp, job, by_hand=by_hand))
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return {
        "node_start_s": node_start,
        "images_import_s": images_s,
        "helm_install_s": install_s,
        "runs": runs,
        "load_before": load_before,
        "load": os.getloadavg(),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def markdown(r: dict[str, Any]) -> str:
    rows = [
        ("LoraRLJob (or rendered objects) applied", "apply"),
        ("RayJob exists", "rayjob"),
        ("head pod created", "pod_created"),
        ("head pod scheduled", "pod_scheduled"),
        ("init container (hf download) started", "init_started"),
        ("init container done", "init_done"),
        ("Ray up (head Ready)", "ray_up"),
        ("submitter Job created", "submitter_job"),
        ("Ray job RUNNING (KubeRay)", "ray_job_running"),
        ("first status report (reporter)", "first_report"),
        ("Ray job SUCCEEDED (KubeRay)", "ray_job_succeeded"),
        ("LoraRLJob Succeeded", "succeeded"),
    ]
    ours = [x for x in r["runs"] if not x["by_hand"]]
    hand = [x for x in r["runs"] if x["by_hand"]]

    def val(run: dict[str, Any], key: str) -> float | None:
        if key == "apply":
            return 0.0
        if key in run["pod"]:
            return run["pod"][key]
        return run["watched"].get(key)

    out = [
        MARK_BEGIN,
        "## The real node: one seed run's timeline (`python -m bench --phases realnode`)",
        "",
        f"Measured {r['when']} on this machine (2 cores, shared with other sessions; load average before "
        f"{r['load_before'][0]:.1f}, afterwards {r['load'][0]:.1f}): the seed "
        "LoraRLJob with the node overrides (`lorarl_dev.seedrun.seed_job`: the job image, 500m CPU, 3Gi, "
        "the Hub stand-in) on the real node with the real KubeRay operator v1.5.0, real Ray 2.55.1 and the "
        "trainer stand-in (100 rollouts of 0.2 s). Node start (control plane, node, KubeRay) "
        f"{r['node_start_s']:.0f} s; image import {r['images_import_s']:.0f} s; `helm install --wait` "
        f"{r['helm_install_s']:.0f} s.",
        "",
        "Seconds after the apply (pod steps from the pod's own timestamps, whole seconds; the rest from a 0.1 s poll of the API):",
        "",
        "| step | via lorarl | rendered RayJob by hand |",
        "|---|---|---|",
    ]
    for label, key in rows:
        out.append(f"| {label} | {_f(val(ours[0], key)) if ours else '-'} | {_f(val(hand[0], key)) if hand else '-'} |")
    if ours and hand:
        added = {k: (ours[0]["watched"].get(k), hand[0]["watched"].get(k)) for k in ("rayjob", "head_pod")}
        if None not in added["rayjob"]:
            a, b = added["rayjob"]
            out += [
                "",
                f"**What lorarl adds to a run's start: {a - b:+.2f} s** (apply -> RayJob seen: {a:.2f} s via the "
                f"LoraRLJob and the operator, {b:.2f} s when the rendered RayJob is applied by hand; goal < 1 s: "
                f"{'met' if a - b < 1 else 'not met'}). Everything after the RayJob is KubeRay's, the kubelet's and Ray's, "
                "the same objects in both runs.",
            ]
        if None not in added["head_pod"]:
            a, b = added["head_pod"]
            out.append(
                f"\nApply -> head pod seen: {a:.2f} s via lorarl, {b:.2f} s by hand ({a - b:+.2f} s: the operator's part "
                "plus the spread of KubeRay's own reconcile between two runs)."
            )
        out.append(
            f"\nThe run via lorarl ended {ours[0]['phase']} with progress.gpuHours {ours[0]['gpu_hours']}; "
            f"the one by hand {hand[0]['job_status']} (its reporter has no LoraRLJob to patch)."
        )
    out.append(MARK_END)
    return "\n".join(out) + "\n"


def write(r: dict[str, Any], page: pathlib.Path = REPO / "docs" / "benchmarks.md") -> None:
    text = page.read_text() if page.exists() else ""
    section = markdown(r)
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        text = head + section + rest.split(MARK_END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    page.write_text(text)
    (page.parent / "benchmarks-realnode.json").write_text(json.dumps(r, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realnode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    r = measure()
    write(r, args.out)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
