"""Pure status mapping: the child RayJob (as KubeRay writes it) -> the LoraRLJob status.

The operator owns phase, conditions, observedGeneration, rayJob, startTime and completionTime;
the in-job reporter owns progress, metrics, eval and checkpoints. ``compute`` returns only the
operator's fields (sent as a merge patch, so the reporter's fields are never touched) plus the
Events that the transitions deserve. See docs/status.md for the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .health import Verdict

PENDING, PREPARING, RUNNING, SUCCEEDED, FAILED, SUSPENDED = (
    "Pending", "Preparing", "Running", "Succeeded", "Failed", "Suspended",
)
PHASES = (PENDING, PREPARING, RUNNING, SUCCEEDED, FAILED, SUSPENDED)
TERMINAL = (SUCCEEDED, FAILED)
CONDITION_TYPES = ("Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "TrainingHealthy")

# KubeRay reasons (RayJob status.reason) that end a run, as documented in the reference.
KUBERAY_FAILURE_REASONS = (
    "SubmissionFailed",
    "DeadlineExceeded",
    "AppFailed",
    "JobDeploymentStatusTransitionGracePeriodExceeded",
    "ValidationFailed",
    "PreRunningDeadlineExceeded",
    "JobStatusCheckTimeoutExceeded",
)


@dataclass(frozen=True)
class Observation:
    """What the RayJob says, in LoraRLJob terms."""

    phase: str
    reason: str
    message: str
    queued: bool = False  # suspended by Kueue, waiting for admission


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Facts:
    """Everything ``compute`` needs besides the RayJob: all decided by the caller."""

    generation: int
    now: str  # RFC 3339
    user_suspended: bool
    queue_name: Optional[str]
    verdict: Verdict
    startup_timed_out: bool = False
    stopped_unhealthy: bool = False
    invalid_spec: Optional[str] = None  # message when the stored spec fails validation
    notes: list[Event] = field(default_factory=list)  # events the caller wants emitted


def observe(rayjob: Optional[dict[str, Any]], user_suspended: bool, queue_name: Optional[str]) -> Observation:
    """Map KubeRay's jobDeploymentStatus/jobStatus/reason to a phase (table in docs/status.md)."""
    if rayjob is None:
        return Observation(PENDING, "RayJobNotCreated", "the RayJob has not been created yet")
    st = rayjob.get("status") or {}
    deployment = st.get("jobDeploymentStatus") or ""
    job_status = st.get("jobStatus") or ""
    reason = st.get("reason") or ""
    message = st.get("message") or ""
    if deployment == "":
        return Observation(PENDING, "RayJobCreated", "waiting for KubeRay to pick up the RayJob")
    if deployment == "Initializing":
        return Observation(PREPARING, "RayClusterInitializing", message or "creating the Ray cluster and downloading inputs")
    if deployment == "Waiting":
        return Observation(PREPARING, "WaitingForSubmission", message or "waiting for the job to be submitted")
    if deployment == "Retrying":
        failed = st.get("failed") or 0
        return Observation(PREPARING, "Retrying", f"attempt {failed} failed ({reason or 'unknown reason'}); starting a new Ray cluster" + (f": {message}" if message else ""))
    if deployment == "Running":
        if job_status == "RUNNING":
            return Observation(RUNNING, "Training", "the trainer is running")
        if job_status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return Observation(RUNNING, "Finishing", f"the Ray job ended with {job_status}; KubeRay is finishing the RayJob")
        return Observation(PREPARING, "JobSubmitted", "the Ray job is submitted and waiting to start")
    if deployment == "Complete":
        if job_status == "SUCCEEDED":
            return Observation(SUCCEEDED, "Succeeded", message or "the training run succeeded")
        if job_status == "STOPPED":
            return Observation(FAILED, "Stopped", message or "the Ray job was stopped")
        return Observation(FAILED, reason or "AppFailed", message or f"the Ray job ended with {job_status or 'an unknown status'}")
    if deployment == "Failed":
        return Observation(FAILED, reason or "Failed", message or "the RayJob failed")
    if deployment == "ValidationFailed":
        return Observation(FAILED, "ValidationFailed", message or "KubeRay rejected the RayJob spec")
    if deployment in ("Suspending", "Suspended"):
        if not user_suspended and queue_name:
            return Observation(PENDING, "Queued", f"waiting for Kueue to admit the job from queue {queue_name}", queued=True)
        return Observation(SUSPENDED, deployment, "the Ray cluster is being deleted" if deployment == "Suspending" else "the run is suspended; its Ray cluster is deleted")
    return Observation(PENDING, "UnknownRayJobState", f"unrecognised RayJob jobDeploymentStatus {deployment!r}")


def rayjob_mirror(rayjob: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if rayjob is None:
        return None
    st = rayjob.get("status") or {}
    mirror = {
        "name": rayjob["metadata"]["name"],
        "rayClusterName": st.get("rayClusterName"),
        "dashboardURL": st.get("dashboardURL"),
        "jobId": st.get("jobId"),
        "jobStatus": st.get("jobStatus"),
        "jobDeploymentStatus": st.get("jobDeploymentStatus"),
        "reason": st.get("reason"),
        "message": st.get("message"),
        "succeeded": st.get("succeeded"),
        "failed": st.get("failed"),
    }
    return {k: v for k, v in mirror.items() if v not in (None, "")}


def setcondition(previous: list[dict[str, Any]], type_: str, status: str, reason: str, message: str, now: str, generation: int) -> dict[str, Any]:
    """A condition whose lastTransitionTime changes only when its status flips."""
    old = next((c for c in previous if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    return {"type": type_, "status": status, "reason": reason, "message": message[:32768], "lastTransitionTime": since, "observedGeneration": generation}


def _bool(value: bool) -> str:
    return "True" if value else "False"


def compute(previous: dict[str, Any], rayjob: Optional[dict[str, Any]], facts: Facts) -> tuple[dict[str, Any], list[Event]]:
    """The operator's status fields and the Events for this observation."""
    prev_phase = previous.get("phase")
    obs = observe(rayjob, facts.user_suspended, facts.queue_name)

    if facts.stopped_unhealthy:
        obs = Observation(FAILED, "StoppedUnhealthy", f"stopped because training was unhealthy: {facts.verdict.message}")
    elif prev_phase in TERMINAL and obs.phase not in TERMINAL:
        # a finished run stays finished (its RayJob may be cleaned up or recreated by hand)
        obs = Observation(prev_phase, condition(previous, "Succeeded" if prev_phase == SUCCEEDED else "Failed", "reason") or prev_phase, condition(previous, "Ready", "message") or "")

    phase = obs.phase
    stalled_reason, stalled_message = "", ""
    if facts.invalid_spec:
        stalled_reason, stalled_message = "InvalidSpec", facts.invalid_spec
    elif phase == FAILED:
        stalled_reason, stalled_message = obs.reason, obs.message
    elif facts.startup_timed_out and phase in (PENDING, PREPARING) and not obs.queued:
        stalled_reason, stalled_message = "StartupTimeout", f"not running after the startup timeout: {obs.message}"

    prev_conditions = previous.get("conditions") or []
    in_progress = phase in (PENDING, PREPARING, RUNNING) and not stalled_reason
    healthy = facts.verdict
    ready = phase == SUCCEEDED or (phase == RUNNING and healthy.status != "False" and not stalled_reason)
    ready_reason = obs.reason if not (phase == RUNNING and healthy.status == "False") else healthy.reason
    g, now = facts.generation, facts.now
    conditions = [
        setcondition(prev_conditions, "Ready", _bool(ready), ready_reason, obs.message if ready_reason == obs.reason else healthy.message, now, g),
        setcondition(prev_conditions, "Reconciling", _bool(in_progress), obs.reason if in_progress else phase, obs.message if in_progress else "", now, g),
        setcondition(prev_conditions, "Stalled", _bool(bool(stalled_reason)), stalled_reason or "NoError", stalled_message, now, g),
        setcondition(prev_conditions, "Succeeded", _bool(phase == SUCCEEDED), obs.reason if phase in TERMINAL else phase, obs.message if phase in TERMINAL else "", now, g),
        setcondition(prev_conditions, "Failed", _bool(phase == FAILED), obs.reason if phase == FAILED else "NotFailed", obs.message if phase == FAILED else "", now, g),
        setcondition(
            prev_conditions, "Suspended", _bool(phase == SUSPENDED or obs.queued),
            obs.reason if (phase == SUSPENDED or obs.queued) else "NotSuspended",
            obs.message if (phase == SUSPENDED or obs.queued) else "", now, g,
        ),
        setcondition(prev_conditions, "TrainingHealthy", healthy.status, healthy.reason, healthy.message, now, g),
    ]

    out: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": g,
        "conditions": conditions,
    }
    mirror = rayjob_mirror(rayjob)
    if mirror is not None:
        out["rayJob"] = mirror
    start = previous.get("startTime") or (now if phase == RUNNING else None)
    if start:
        out["startTime"] = start
    if phase in TERMINAL:
        end = ((rayjob or {}).get("status") or {}).get("endTime")
        out["completionTime"] = previous.get("completionTime") or end or now

    events = list(facts.notes)
    if phase != prev_phase:
        kind = "Warning" if phase == FAILED else "Normal"
        events.append(Event(kind, phase, f"{prev_phase or 'New'} -> {phase}: {obs.reason}: {obs.message}"[:1024]))
    if healthy.status == "False" and condition(previous, "TrainingHealthy", "status") != "False":
        events.append(Event("Warning", healthy.reason, healthy.message))
    if stalled_reason and condition(previous, "Stalled", "status") != "True" and phase != FAILED:
        events.append(Event("Warning", stalled_reason, stalled_message[:1024]))
    return out, events


def condition(status: dict[str, Any], type_: str, key: str) -> Optional[str]:
    """A field of one condition in a stored status, or None."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get(key)
    return None


def changed(previous: dict[str, Any], new: dict[str, Any]) -> bool:
    """True when writing ``new`` would change the stored status."""
    return any(previous.get(k) != v for k, v in new.items())
