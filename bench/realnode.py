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
import statistics
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


def run_one(cp: ControlPlane, job: dict[str, Any], *, by_hand: bool, tools_image: str, timeout: float = 900) -> dict[str, Any]:
    ns = job["metadata"]["namespace"]
    name = job["metadata"]["name"]
    cp.kubectl("create", "namespace", ns)
    if by_hand:
        rendered = subprocess.run(
            [str(pathlib.Path(sys.executable).with_name("lorarl")), "render", "-f", "-", "-n", ns, "--tools-image", tools_image],
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
        "deployment_status": rj.get("jobDeploymentStatus"),
        "reason": rj.get("reason"),
        "phase": lj.get("phase"),
        "gpu_hours": lj.get("progress", {}).get("gpuHours"),
        "timed_out": done not in watcher.seen,
    }


def _clear(cp: ControlPlane, ns: str, timeout: float = 300) -> None:
    """Delete a run's namespace and wait until it is gone, so the next run has the node to itself."""
    cp.kubectl("delete", "namespace", ns, f"--timeout={int(timeout)}s", timeout=timeout + 30, check=False)


def measure(rounds: int = 1) -> dict[str, Any]:
    from lorarl_dev.node import realnode

    realnode.sweep()  # a node left by a killed run goes first (as the real_node_cluster fixture does)
    t0, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lorarl-bench-hub-") as hub_root:
        hubstub.make_seed_repos(hub_root)
        with ControlPlane(node=True, gpus=16, node_profile="MI355X", kuberay_operator=True) as cp:
            node_start = time.monotonic() - t0
            endpoint = seedrun.start_hub(cp, pathlib.Path(hub_root))
            t = time.monotonic()
            refs = seedrun.import_images(cp)
            images_s = time.monotonic() - t
            t = time.monotonic()
            seedrun.install_operator(cp, refs["operator"], replicas=1)
            install_s = time.monotonic() - t
            setup = {"node_start_s": node_start, "images_import_s": images_s, "helm_install_s": install_s}
            print(json.dumps(setup), file=sys.stderr, flush=True)
            runs: list[dict[str, Any]] = []
            try:
                for _ in range(rounds):
                    for by_hand in (False, True):
                        ns = f"bench-{'hand' if by_hand else 'lorarl'}-{uuid.uuid4().hex[:5]}"
                        job = seedrun.seed_job(image=refs["job"], endpoint=endpoint, namespace=ns)
                        runs.append({**run_one(cp, job, by_hand=by_hand, tools_image=refs["operator"]), "load": os.getloadavg()[0]})
                        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
                        _clear(cp, ns)
            except KeyboardInterrupt:  # stopped early (the node is wanted elsewhere): keep the runs made
                if len(runs) < 2:
                    raise
    return {
        "node_start_s": node_start,
        "images_import_s": images_s,
        "helm_install_s": install_s,
        "runs": runs,
        "load_before": load_before,
        "load": os.getloadavg(),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _s(v: float | None) -> str:
    return "not recorded" if v is None else f"{v:.0f} s"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _spread(values: list[float | None], digits: int = 1) -> str:
    """Median, and min-max when there is more than one run."""
    got = sorted(v for v in values if v is not None)
    if not got:
        return "-"
    med = statistics.median(got)
    return f"{med:.{digits}f}" if len(got) == 1 else f"{med:.{digits}f} ({got[0]:.{digits}f}-{got[-1]:.{digits}f})"


ROWS = [
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
    ("RayJob Complete (KubeRay's endTime: the submitter has ended)", "ray_job_end"),
    ("LoraRLJob Succeeded", "succeeded"),
]


def _val(run: dict[str, Any], key: str) -> float | None:
    if key == "apply":
        return 0.0
    if key == "ray_job_end":
        return run.get("ray_job_end")
    if key in run["pod"]:
        return run["pod"][key]
    return run["watched"].get(key)


def added_seconds(r: dict[str, Any], key: str = "rayjob") -> list[float]:
    """Per round: (apply -> ``key`` via lorarl) - (the same by hand), runs paired in order."""
    ours = [x for x in r["runs"] if not x["by_hand"]]
    hand = [x for x in r["runs"] if x["by_hand"]]
    return [a["watched"][key] - b["watched"][key] for a, b in zip(ours, hand, strict=False) if key in a["watched"] and key in b["watched"]]


def _outcome(run: dict[str, Any]) -> str:
    """How a run by hand ended, in KubeRay's words (what the watch saw last)."""
    if run.get("job_status") == "SUCCEEDED":
        return "SUCCEEDED"
    words = [w for w in (run.get("deployment_status"), run.get("reason")) if w]
    end = run.get("ray_job_end")
    return f"{'/'.join(words) or 'no Ray job status'}{f' at {end:.0f} s' if end is not None else ''}{' (the wait ran out)' if run.get('timed_out') else ''}"


def markdown(r: dict[str, Any]) -> str:
    ours = [x for x in r["runs"] if not x["by_hand"]]
    hand = [x for x in r["runs"] if x["by_hand"]]
    loads = [x["load"] for x in r["runs"] if "load" in x]
    out = [
        MARK_BEGIN,
        "## The real node: one seed run's timeline (`python -m bench --phases realnode`)",
        "",
        f"Measured {r['when']} on this machine (2 cores, shared with other work; load average before "
        f"{r['load_before'][0]:.1f}, after each run {', '.join(f'{v:.1f}' for v in loads) or '-'}, at the end "
        f"{r['load'][0]:.1f}): the seed LoraRLJob with the node overrides (`lorarl_dev.seedrun.seed_job`: the "
        "job image, 500m CPU, 3Gi, the Hub stand-in) on the real node with the real KubeRay operator v1.5.0, "
        "real Ray 2.55.1 and the trainer stand-in (100 rollouts of 0.2 s), against the same objects rendered by "
        "`lorarl render --tools-image <the operator image>` and applied with kubectl (no LoraRLJob, no operator). "
        f"{len(ours)} run(s) via lorarl and {len(hand)} by hand, alternating, each in a namespace of its own "
        "deleted before the next. Node start (control plane, node, KubeRay) "
        f"{_s(r.get('node_start_s'))}; image build or reuse and import {_s(r.get('images_import_s'))}; `helm install --wait` "
        f"{_s(r.get('helm_install_s'))} (one operator replica, leader election on).",
        "",
        "Seconds after the apply, median (min-max) over the runs; pod steps from the head pod's own timestamps "
        "(whole seconds), the rest when a 0.1 s poll of the API first saw them:",
        "",
        "| step | via lorarl | rendered objects by hand |",
        "|---|---|---|",
    ]
    for label, key in ROWS:
        out.append(f"| {label} | {_spread([_val(x, key) for x in ours])} | {_spread([_val(x, key) for x in hand])} |")
    added = added_seconds(r)
    if added:
        med = statistics.median(added)
        via = [x["watched"]["rayjob"] for x in ours if "rayjob" in x["watched"]]
        by = [x["watched"]["rayjob"] for x in hand if "rayjob" in x["watched"]]
        out += [
            "",
            f"**What lorarl adds to a run's start: {med:+.2f} s** (median of {len(added)} paired rounds: "
            f"{', '.join(f'{v:+.2f}' for v in added)} s; apply -> RayJob seen: {_spread(via, 2)} s via the "
            f"LoraRLJob and the operator, {_spread(by, 2)} s when the rendered objects are applied by hand; goal < 1 s: "
            f"{'met' if med < 1 else 'not met'}). Everything after the RayJob is KubeRay's, the kubelet's and Ray's, "
            "the same objects in both runs.",
        ]
    pod_added = added_seconds(r, "head_pod")
    if pod_added:
        out.append(
            f"\nApply -> head pod seen: {', '.join(f'{v:+.2f}' for v in pod_added)} s via lorarl against by hand, per round "
            "(the operator's part plus the spread of KubeRay's own reconcile between two runs)."
        )
    if ours and hand:
        out.append(
            f"\nThe runs via lorarl ended {', '.join(str(x['phase']) for x in ours)} with progress.gpuHours "
            f"{', '.join(str(x['gpu_hours']) for x in ours)}; the ones by hand (their reporter has no LoraRLJob to patch) "
            + ", ".join(_outcome(x) for x in hand)
            + "."
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


def _load(path: pathlib.Path) -> dict[str, Any]:
    """A result written by :func:`write`, or the lines a run printed on stderr (its set-up figures
    and one line per run: what is left of a run stopped before the page was written)."""
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    r: dict[str, Any] = {
        "runs": [x for x in lines if "by_hand" in x],
        "when": datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC).isoformat(timespec="seconds"),
    }
    for x in lines:
        if "by_hand" not in x:
            r.update(x)
    loads = [x["load"] for x in r["runs"]]
    r.setdefault("load_before", [loads[0] if loads else 0.0])
    r.setdefault("load", [loads[-1] if loads else 0.0])
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realnode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--rounds", type=int, default=3, help="runs via lorarl and by hand, alternating (default 3 each)")
    parser.add_argument("--from-json", type=pathlib.Path, help="write the page from a saved result instead of measuring")
    args = parser.parse_args(argv)
    r = _load(args.from_json) if args.from_json else measure(args.rounds)
    write(r, args.out)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
