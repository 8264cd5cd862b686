"""Helpers moved out of tests/operator/test_status.py (test modules hold tests only)."""

from __future__ import annotations

from lorarl.control import pods, status
from lorarl.control.adapter_status import ExportState
from lorarl.control.health import Verdict
from lorarl.control.queueing import Admission
from lorarl.control.serve_status import ServeState
from lorarl.reporter import oom

OK = Verdict("True", "WithinThresholds", "fine")


UNKNOWN = Verdict("Unknown", "AwaitingMetrics", "no step yet")


NOW = "2026-11-30T10:00:00Z"
T, F = "True", "False"


def rayjob(deployment="", job_status="", reason="", message="", **extra):
    st = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "reason": reason, "message": message, **extra}
    return {"metadata": {"name": "j", "creationTimestamp": "2026-11-30T09:00:00Z"}, "status": {k: v for k, v in st.items() if v != ""}}


def facts(**kw):
    base = dict(generation=3, now=NOW, user_suspended=False, queue_name=None, verdict=UNKNOWN)
    base.update(kw)
    return status.Facts(**base)


WAITING_POD_REASONS = (pods.UNSCHEDULABLE, pods.VOLUME_NOT_BOUND)  # they may resolve by themselves


BAD = Verdict("False", "LogprobDiffTooHigh", "mean 0.05 >= 0.03")
LOW_EVAL = Verdict("False", "EvalScoreTooLow", "eval/aime24 0.1 at rollout 20 < minimum 0.2")
DIVERGED = Verdict("False", "NonFiniteMetric", "train/loss has been NaN in every rollout since rollout 12")


REFUSED = (
    'applying RayJob ns/j: 422 Unprocessable Entity: RayJob.ray.io "j" is invalid: spec.rayClusterSpec.headGroupSpec.template.spec.affinity: Invalid value'
)


SERVING = ServeState("Unknown", "Loading", "the load Job j-serve runs", None, False)
SERVED = ServeState(
    "True", "Served", "j at http://sglang.serving.svc:30000 (/adapters/ns/j/rollout-0000099)", {"server": "http://sglang.serving.svc:30000", "name": "j"}, False
)
SERVE_FAILED = ServeState(
    "False", "LoadRefused", 'POST /load_lora_adapter answered HTTP 400; the server said "LoRA adapter j with rank 64 is incompatible"', None, True
)
EXPORTING = ExportState("Unknown", "Exporting", "the export Job j-export runs", None, False)
EXPORTED = ExportState("True", "Exported", "s3://adapters/ns/j/rollout-0000099/ (sha256:ab, rollout 99)", {"uri": "s3://adapters/ns/j/rollout-0000099/"}, False)
EXPORT_FAILED = ExportState("False", "SaveIncomplete", "the newest save is not complete", None, True)


# Written by hand from docs/status.md (KubeRay states) and kstatus's rules (sigs.k8s.io/cli-utils
# v0.37.2 pkg/kstatus/status: Reconciling=True -> InProgress, else Stalled=True -> Failed, else
# Ready=True -> Current, Ready=False -> InProgress); never computed from lorarl.control.status.
# KubeRay's failure reasons are the JobFailedReason values of ray-operator v1.5.0
# apis/ray/v1/rayjob_types.go plus the deadline/timeout reasons of docs/status.md.
# id: (RayJob (deployment, jobStatus, reason) or None, Facts overrides,
#      phase, Ready, Ready reason, Reconciling, Stalled, Succeeded, Failed, Suspended, kstatus)
TABLE = {
    "no-rayjob": (None, {}, "Pending", F, "RayJobNotCreated", T, F, F, F, F, "InProgress"),
    "created": (("", "", ""), {}, "Pending", F, "RayJobCreated", T, F, F, F, F, "InProgress"),
    # New ("") again on a retry or resume: KubeRay keeps startTime and the counters
    "restarting-after-retry": (("", "", "", "", {"startTime": NOW, "failed": 1}), {}, "Preparing", F, "RayClusterRestarting", T, F, F, F, F, "InProgress"),
    "restarting-after-resume": (("", "", "", "", {"startTime": NOW, "failed": 0}), {}, "Preparing", F, "RayClusterRestarting", T, F, F, F, F, "InProgress"),
    "queued-initializing": (
        ("Initializing", "", "", "", {}, {"suspend": True}),
        {"queue_name": "rl-team"},
        "Pending",
        F,
        "Queued",
        T,
        F,
        F,
        F,
        T,
        "InProgress",
    ),
    "initializing": (("Initializing", "", ""), {}, "Preparing", F, "RayClusterInitializing", T, F, F, F, F, "InProgress"),
    "waiting": (("Waiting", "", ""), {}, "Preparing", F, "WaitingForSubmission", T, F, F, F, F, "InProgress"),
    "submitted-pending": (("Running", "PENDING", ""), {}, "Preparing", F, "JobSubmitted", T, F, F, F, F, "InProgress"),
    "submitted": (("Running", "", ""), {}, "Preparing", F, "JobSubmitted", T, F, F, F, F, "InProgress"),
    "running-awaiting-metrics": (("Running", "RUNNING", ""), {}, "Running", T, "Training", F, F, F, F, F, "Current"),
    "running-healthy": (("Running", "RUNNING", ""), {"verdict": OK}, "Running", T, "Training", F, F, F, F, F, "Current"),
    "running-unhealthy": (("Running", "RUNNING", ""), {"verdict": BAD}, "Running", F, "LogprobDiffTooHigh", F, T, F, F, F, "Failed"),
    "finishing": (("Running", "SUCCEEDED", ""), {}, "Running", T, "Finishing", F, F, F, F, F, "Current"),
    "succeeded": (("Complete", "SUCCEEDED", ""), {}, "Succeeded", T, "Succeeded", F, F, T, F, F, "Current"),
    # spec.export (docs/adapters.md): the run stays Ready; in progress while the adapter is exported, Failed when that failed for good
    "succeeded-exporting": (("Complete", "SUCCEEDED", ""), {"export": EXPORTING}, "Succeeded", T, "Succeeded", T, F, T, F, F, "InProgress"),
    "succeeded-exported": (("Complete", "SUCCEEDED", ""), {"export": EXPORTED}, "Succeeded", T, "Succeeded", F, F, T, F, F, "Current"),
    "succeeded-export-failed": (("Complete", "SUCCEEDED", ""), {"export": EXPORT_FAILED}, "Succeeded", T, "Succeeded", F, T, T, F, F, "Failed"),
    # spec.serve (docs/adapters.md): likewise while the exported adapter is loaded into the server, and when the server refused it
    "succeeded-serving": (("Complete", "SUCCEEDED", ""), {"export": EXPORTED, "serve": SERVING}, "Succeeded", T, "Succeeded", T, F, T, F, F, "InProgress"),
    "succeeded-served": (("Complete", "SUCCEEDED", ""), {"export": EXPORTED, "serve": SERVED}, "Succeeded", T, "Succeeded", F, F, T, F, F, "Current"),
    "succeeded-serve-failed": (
        ("Complete", "SUCCEEDED", ""),
        {"export": EXPORTED, "serve": SERVE_FAILED},
        "Succeeded",
        T,
        "Succeeded",
        F,
        T,
        T,
        F,
        F,
        "Failed",
    ),
    "stopped": (("Complete", "STOPPED", ""), {}, "Failed", F, "Stopped", F, T, F, T, F, "Failed"),
    "complete-failed": (("Complete", "FAILED", "AppFailed"), {}, "Failed", F, "AppFailed", F, T, F, T, F, "Failed"),
    "retrying": (("Retrying", "FAILED", "AppFailed"), {}, "Preparing", F, "Retrying", T, F, F, F, F, "InProgress"),
    "suspend-requested": (("Running", "RUNNING", ""), {"user_suspended": True}, "Running", F, "SuspendRequested", T, F, F, F, F, "InProgress"),
    "suspending": (("Suspending", "", ""), {"user_suspended": True}, "Suspended", F, "Suspending", T, F, F, F, T, "InProgress"),
    "suspended": (("Suspended", "", ""), {"user_suspended": True}, "Suspended", T, "Suspended", F, F, F, F, T, "Current"),
    "resuming": (("Suspended", "", ""), {}, "Suspended", F, "Resuming", T, F, F, F, T, "InProgress"),
    "suspended-unhealthy": (("Suspended", "", ""), {"verdict": BAD}, "Suspended", F, "LogprobDiffTooHigh", F, T, F, F, T, "Failed"),
    "queued": (("Suspended", "", ""), {"queue_name": "rl-team"}, "Pending", F, "Queued", T, F, F, F, T, "InProgress"),
    "queued-user-suspended": (("Suspended", "", ""), {"queue_name": "rl-team", "user_suspended": True}, "Suspended", T, "Suspended", F, F, F, F, T, "Current"),
    "startup-timeout": (("Initializing", "", ""), {"startup_timed_out": True}, "Preparing", F, "StartupTimeout", F, T, F, F, F, "Failed"),
    "queued-past-startup-timeout": (("Suspended", "", ""), {"queue_name": "q", "startup_timed_out": True}, "Pending", F, "Queued", T, F, F, F, T, "InProgress"),
    "invalid-spec": (None, {"invalid_spec": "spec.extraArgs[0]: --lora-rank is set from the spec"}, "Pending", F, "InvalidSpec", F, T, F, F, F, "Failed"),
    "stopped-unhealthy": (None, {"verdict": BAD, "stopped_unhealthy": True}, "Failed", F, "StoppedUnhealthy", F, T, F, T, F, "Failed"),
    "validation-failed": (("ValidationFailed", "", "ValidationFailed"), {}, "Failed", F, "ValidationFailed", F, T, F, T, F, "Failed"),
    "apply-failed-new": (None, {"apply_failed": REFUSED}, "Pending", F, "ApplyFailed", F, T, F, F, F, "Failed"),
    "apply-failed-running": (("Running", "RUNNING", ""), {"apply_failed": REFUSED, "verdict": OK}, "Running", F, "ApplyFailed", F, T, F, F, F, "Failed"),
    "apply-failed-unhealthy": (("Running", "RUNNING", ""), {"apply_failed": REFUSED, "verdict": BAD}, "Running", F, "ApplyFailed", F, T, F, F, F, "Failed"),
    "unknown-state": (("SomethingNew", "", ""), {}, "Pending", F, "UnknownRayJobState", T, F, F, F, F, "InProgress"),
    # the pods say why a Ray cluster does not start (pods.diagnose): stuck, or waiting
    **{
        f"pod-{reason}": (
            ("Initializing", "", ""),
            {"pod_trouble": pods.Trouble(reason, f"pod j-head container ray-head: {reason}", reason not in WAITING_POD_REASONS)},
            "Preparing",
            F,
            reason,
            T if reason in WAITING_POD_REASONS else F,
            F if reason in WAITING_POD_REASONS else T,
            F,
            F,
            F,
            "InProgress" if reason in WAITING_POD_REASONS else "Failed",
        )
        for reason in pods.REASONS
    },
    # a running pod's node stopped being Ready (pods.node_not_ready): in progress, not stuck
    "running-node-not-ready": (
        ("Running", "RUNNING", ""),
        {"node_not_ready": pods.Trouble(pods.NODE_NOT_READY, "pod j-head: its node n1 is not ready", False)},
        "Running",
        F,
        "NodeNotReady",
        T,
        F,
        F,
        F,
        F,
        "InProgress",
    ),
    "running-eval-too-low": (("Running", "RUNNING", ""), {"verdict": LOW_EVAL}, "Running", F, "EvalScoreTooLow", F, T, F, F, F, "Failed"),
    "running-non-finite": (("Running", "RUNNING", ""), {"verdict": DIVERGED}, "Running", F, "NonFiniteMetric", F, T, F, F, F, "Failed"),
    "queued-preempted": (
        ("Suspended", "", ""),
        {"queue_name": "q", "admission": Admission(workload="w", evicted_reason="Preempted", evicted_message="Preempted to accommodate a workload")},
        "Pending",
        F,
        "Preempted",
        T,
        F,
        F,
        F,
        T,
        "InProgress",
    ),
    "queued-deactivated": (
        ("Suspended", "", ""),
        {"queue_name": "q", "admission": Admission(workload="w", active=False)},
        "Pending",
        F,
        "WorkloadDeactivated",
        F,
        T,
        F,
        F,
        T,
        "Failed",
    ),
    "no-progress": (
        ("Running", "RUNNING", ""),
        {"no_progress": "no progress reported for 61s while Running"},
        "Running",
        F,
        "NoProgress",
        F,
        T,
        F,
        F,
        F,
        "Failed",
    ),
    "driver-lost": (
        ("Running", "RUNNING", ""),
        {"driver_lost": "the driver is gone: the Ray head pod j-head of RayCluster j-x was deleted", "no_progress": "no progress reported for 61s"},
        "Running",
        F,
        "DriverLost",
        F,
        T,
        F,
        F,
        F,
        "Failed",
    ),
    # the reporter's last line, in the last 10 log lines Ray puts into the message of a failed entrypoint
    "oom-killed": (
        (
            "Complete",
            "FAILED",
            "AppFailed",
            f"Job entrypoint command failed with exit code 137, last available logs (truncated to 20,000 chars):\nstep 3\n[lorarl-reporter] {oom.MARKER}",
        ),
        {},
        "Failed",
        F,
        "OOMKilled",
        F,
        T,
        F,
        T,
        F,
        "Failed",
    ),
    # Ray's memory monitor was first (recorded on the real node, Ray 2.55.1, the CPU busy): Ray's words,
    # as KubeRay copied them into the RayJob's message (cut where the status cut it)
    "oom-killed-by-ray": (
        (
            "Complete",
            "FAILED",
            "AppFailed",
            "Unexpected error occurred: 1 worker(s) were killed due to the node running low on memory. Memory on the node "
            "(IP: 10.213.0.8, ID: d7e5356f998e05b945c70bb0315c01c91b7c123ff1788fa2768625cb) was 1.92GB",
        ),
        {},
        "Failed",
        F,
        "OOMKilled",
        F,
        T,
        F,
        T,
        F,
        "Failed",
    ),
    **{
        f"failed-{reason}": (("Failed", "FAILED", reason), {}, "Failed", F, reason, F, T, F, T, F, "Failed")
        for reason in (
            "SubmissionFailed",
            "DeadlineExceeded",
            "AppFailed",
            "JobDeploymentStatusTransitionGracePeriodExceeded",
            "ValidationFailed",
            "PreRunningDeadlineExceeded",
            "JobStatusCheckTimeoutExceeded",
        )
    },
}


def computed(case):
    """The status lorarl.control.status computes for one TABLE row."""
    ray, overrides = TABLE[case][:2]
    rj = None if ray is None else rayjob(*ray[:4], **(ray[4] if len(ray) > 4 else {}))
    if ray is not None and len(ray) > 5:
        rj["spec"] = ray[5]
    out, _ = status.compute({}, rj, facts(**overrides))
    return out
