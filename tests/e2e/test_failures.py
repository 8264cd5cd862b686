"""Every failure a user can meet, caused for real on the real node, as the LoraRLJob's status
shows it: an image that is not there, more GPUs than the node has, a download the Hub stand-in
refuses, a missing Secret, a memory limit the trainer stand-in exceeds (the kernel or Ray's memory
monitor may kill it: both are OOMKilled), a trainer that exits 1, a trainer that hangs. Then
``lorarl logs -f`` against the hanging job's real submitter.

The oracles are outside the operator's mapping: the kubelet, the scheduler, containerd's OOM
report, real Ray's job status as KubeRay copies it, the real submitter's log. Each case asserts
the phase, the Ready reason and the words of its message, and records the seconds from the
apply to the first status that showed it (printed, and the table of docs/reliability.md; the messages in docs/troubleshooting.md);
the only time bound is a generous wait.

Several small jobs run at once (one GPU, 100m CPU each: the node has 16 fake GPUs and 2 cores).
The GPU case asks for 2 x 9 GPUs: its head is scheduled and its worker cannot be, and the 7 GPUs
left are the other cases' (it ran alone first, asking for 2 x 16).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from lorarl_dev import seedrun

from tests.e2e.conftest import MEASURED

pytestmark = pytest.mark.node

SHOW_TIMEOUT = 600  # a generous bound on 2 shared cores, not a measurement
SMALL = {"gpusPerNode": 1, "cpu": "100m", "memory": "1Gi"}  # pods that never run Ray
RUNS = {"gpusPerNode": 1, "cpu": "100m", "memory": "3Gi"}  # pods that run the trainer stand-in


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict
    knobs: dict | None  # the trainer stand-in's standin.json (a model revision of its own)
    phase: str
    reason: str
    stalled: bool
    words: tuple[str, ...]  # the Ready message must hold each


CASES = (
    Case(
        "f-image",
        {"hardware": SMALL, "runPolicy": {"image": "docker.io/library/not-there:never", "imagePullPolicy": "Never"}},
        None,
        "Preparing",
        "ImagePullBackOff",
        True,
        ("init container prepare", "cannot pull image docker.io/library/not-there:never", "ErrImageNeverPull"),
    ),
    Case(
        "f-download",
        {"hardware": SMALL},
        None,  # a revision the Hub stand-in does not have: huggingface_hub's RevisionNotFound
        "Preparing",
        "InputDownloadFailed",
        True,
        ("init container prepare exited 4", "could not download model Qwen/Qwen3-4B@not-on-the-hub"),
    ),
    Case(
        "f-secret",
        {"hardware": SMALL, "tracking": {"wandb": {"apiKeySecretRef": {"name": "wandb-missing", "key": "api-key"}}}},
        {},
        "Preparing",
        "CreateContainerConfigError",
        True,
        ("container ray-head", 'secret "wandb-missing" not found'),
    ),
    Case(
        "f-oom",
        {"hardware": {**RUNS, "memory": "2Gi"}},
        {"allocate_mib": 3072, "allocate_at_rollout": 1, "seconds_per_rollout": 0.5},
        "Failed",
        "OOMKilled",
        True,
        ("memory limit", "spec.hardware.memory"),
    ),
    Case(
        "f-exit",
        {"hardware": RUNS},
        {"exit_at_rollout": 2, "seconds_per_rollout": 0.5},
        "Failed",
        "AppFailed",
        True,
        ("exit code 1", "kubectl logs job/f-exit"),
    ),
    Case(
        "f-hang",
        {"hardware": RUNS, "health": {"progressTimeoutSeconds": 60}},
        {"hang_at_rollout": 4, "seconds_per_rollout": 2},
        "Running",
        "NoProgress",
        True,
        ("no progress reported for", "limit 60s", "spec.health.progressTimeoutSeconds"),
    ),
)
# after the others' heads: a run whose rewards turn NaN at rollout 2 and stay NaN (the stand-in's
# workers.py nan_reward_from); the reporter's nonFinite -> TrainingHealthy=False after 3 rollouts
NAN_CASE = Case(
    "f-nan",
    {"hardware": RUNS},
    {"nan_reward_from": 2, "seconds_per_rollout": 1},
    "Running",
    "NonFiniteMetric",
    True,
    ("rollout/raw_reward has been NaN in every rollout since rollout 2", "status.metrics.nonFinite"),
)
CASES = (*CASES, NAN_CASE)
GPU_CASE = Case(
    "f-gpus",
    # 18 data-parallel ranks: the batch of 9 prompts x 8 samples makes one step of 72 (the API's rule)
    {"hardware": {"nodes": 2, "gpusPerNode": 9, "cpu": "100m", "memory": "1Gi"}, "rollout": {"batchSize": 9, "globalBatchSize": 72}},
    None,
    "Preparing",
    "Unschedulable",
    False,
    ("cannot be scheduled", "Insufficient amd.com/gpu"),
)


@dataclass
class Seen:
    """What the poller saw of one job: each Ready reason the first time it appeared."""

    applied: float
    first: dict[str, tuple[float, dict]] = field(default_factory=dict)  # reason -> (seconds, status)
    last: dict = field(default_factory=dict)  # the latest status


class Watcher:
    """Polls the namespace's LoraRLJobs every second (kubectl, as a user would) and records when
    each job first showed each reason; a test then reads the record instead of polling late."""

    def __init__(self, cp, ns: str) -> None:
        self.cp, self.ns, self.seen, self.lock, self.stop = cp, ns, {}, threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def applied(self, name: str) -> None:
        with self.lock:
            self.seen[name] = Seen(time.monotonic())

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            proc = self.cp.kubectl("get", "lorarljobs", "-n", self.ns, "-o", "json", check=False)
            if proc.returncode:
                continue
            now = time.monotonic()
            for job in json.loads(proc.stdout)["items"]:
                st = job.get("status") or {}
                ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), None)
                with self.lock:
                    seen = self.seen.get(job["metadata"]["name"])
                    if seen:
                        seen.last = st
                    if ready and seen and ready["reason"] not in seen.first:
                        seen.first[ready["reason"]] = (round(now - seen.applied, 1), st)

    def wait(self, case: Case, explain) -> tuple[float, dict]:
        def shown():
            with self.lock:
                seen = self.seen[case.name]
                found = seen.first.get(case.reason)
                if found is None and seen.last.get("phase") in ("Succeeded", "Failed"):  # it ended otherwise: no use waiting
                    raise AssertionError(f"{case.name} ended without {case.reason}: {seen.first.keys()}; {json.dumps(seen.last)[:3000]}")
                return found

        return seedrun.wait_for(f"{case.name} shows {case.reason}", shown, SHOW_TIMEOUT, explain=lambda: f"{self.seen[case.name].first.keys()}: {explain()}")


def _apply(cp, hub, images, ns: str, watcher: Watcher, case: Case) -> None:
    revision = hub.revision(case.knobs) if case.knobs is not None else "not-on-the-hub"
    job = seedrun.seed_job(image=images["job"], endpoint=hub.endpoint, name=case.name, namespace=ns, model_revision=revision, spec=case.spec)
    watcher.applied(case.name)
    cp.kubectl("apply", "-f", "-", input=json.dumps(job))


class Follower:
    """``lorarl logs -f JOB`` started before the job's submitter exists, each line it prints
    recorded with the moment it arrived."""

    def __init__(self, cp, ns: str, name: str) -> None:
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        cmd = [sys.executable, "-m", "lorarl.cli", "logs", "-f", name, "-n", ns]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=lambda: [self.lines.append((time.monotonic(), line)) for line in self.proc.stdout], daemon=True).start()

    def arrival(self, words: str) -> float | None:
        return next((t for t, line in list(self.lines) if words in line), None)

    def text(self) -> str:
        return "".join(line for _, line in list(self.lines))[-3000:]

    def close(self) -> str:
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=10)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return ""


def _selected(session) -> set[str]:
    """The cases the run selected (``-k f-nan`` applies that job alone; the logs test needs f-hang)."""
    names = {item.callspec.params["case"].name for item in session.items if "case" in getattr(getattr(item, "callspec", None), "params", {})}
    if any(item.originalname == "test_lorarl_logs_follows_the_trainer_as_it_prints" for item in session.items):
        names.add("f-hang")
    return names


@pytest.fixture(scope="module")
def failures(request, real_node_cluster, hub, node_images, lorarl_operator):
    """Every selected case applied in one namespace (the GPU case first: its head starts Ray while
    the first cases wait), ``lorarl logs -f`` following the hanging job from before its submitter
    starts; the watcher's record."""
    cp, ns = real_node_cluster, f"fail-{uuid.uuid4().hex[:6]}"
    selected = _selected(request.session)
    cp.kubectl("create", "namespace", ns)
    watcher, follower = Watcher(cp, ns), None
    explain = lambda: seedrun.describe(cp, ns)  # noqa: E731
    try:
        if GPU_CASE.name in selected:
            _apply(cp, hub, node_images, ns, watcher, GPU_CASE)
            watcher.wait(GPU_CASE, explain)
        cases = [case for case in CASES if case.name in selected]
        for case in cases:
            if case.knobs is None or "tracking" in case.spec:  # no Ray head ever starts: all at once
                _apply(cp, hub, node_images, ns, watcher, case)
        # Ray heads one after another: `ray start` gives the raylet a fixed 30 s to register
        # (ray/_private/node.py:409-425, Ray 2.55.1), which three heads starting together on 2
        # shared cores miss (and crash-loop)
        for case in cases:
            if case.knobs is not None and "tracking" not in case.spec:
                if case.name == "f-hang":
                    follower = Follower(cp, ns, case.name)
                _apply(cp, hub, node_images, ns, watcher, case)
                seedrun.wait_for(f"{case.name}'s Ray head up", lambda c=case: seedrun.ray_head_up(cp, ns, c.name), SHOW_TIMEOUT, explain=explain)
        yield ns, watcher, follower, explain
    finally:
        watcher.stop.set()
        if follower is not None:
            follower.close()
        report = {name: {reason: seconds for reason, (seconds, _) in seen.first.items()} for name, seen in watcher.seen.items()}
        MEASURED.append(f"test_failures: seconds from apply to each Ready reason: {json.dumps(report, sort_keys=True)}")
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize("case", (GPU_CASE, *CASES), ids=lambda c: c.name)
def test_the_status_says_why_the_job_waits_is_stuck_or_failed(failures, case):
    ns, watcher, _, explain = failures
    seconds, st = watcher.wait(case, explain)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    stalled = next(c for c in st["conditions"] if c["type"] == "Stalled")
    print(f"\n{case.name}: {st['phase']} {ready['reason']} after {seconds}s: {ready['message']}", file=sys.stderr)
    assert (st["phase"], ready["status"], stalled["status"]) == (case.phase, "False", "True" if case.stalled else "False"), st
    for word in case.words:
        assert word in ready["message"], (word, ready["message"])
    assert "\n" not in ready["message"]


def test_lorarl_logs_follows_the_trainer_as_it_prints(failures):
    """The hanging job's trainer logs a rollout every 2 s until rollout 4: ``lorarl logs -f``
    (started before the submitter existed) shows those lines as the real submitter's log grows,
    and is still following once the trainer hangs."""
    ns, watcher, follower, explain = failures
    first = seedrun.wait_for("rollout 0 logged", lambda: follower.arrival("rollout 0: "), SHOW_TIMEOUT, explain=lambda: follower.text() + explain())
    last = seedrun.wait_for("rollout 3 logged", lambda: follower.arrival("rollout 3: "), 120, explain=follower.text)
    # three rollouts of 2 s each lie between them: the lines came as the trainer printed them
    assert last - first >= 3, follower.text()
    assert "log_utils.py:123" in follower.text()  # the trainer's own line (miles' log header), through Ray
    assert follower.proc.poll() is None, follower.close()  # still following: the job has not ended
