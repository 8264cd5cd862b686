"""Pure status mapping: the child RayJob (as KubeRay writes it) -> the LoraRLJob status.

The operator owns phase, conditions, observedGeneration, rayJob, startTime, completionTime,
gpuAccounting and progress.gpuHours (both from the pods: gpuhours.py, written by the reconcile);
the in-job reporter owns the rest of progress, metrics, eval, checkpoints, tracking and history. ``compute`` returns only the
operator's fields (sent as a merge patch, so the reporter's fields are never touched), typed as
``api.types.OperatorStatusDict`` (the CRD's model ``LoraRLJobStatus`` as a dict), plus the Events
that the transitions deserve. The stored status it reads (``previous``) is the API server's dict as
it is: the reporter and other operator versions write it too. See docs/status.md for the contract.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from ..api import types as api
from ..api.types import ACCESS_KEY_SHAPED_VALUE
from ..reporter import oom
from ..reporter.text import printable
from . import adapter_status, pods, serve_status
from .driver import DRIVER_LOST
from .health import NO_PROGRESS, Verdict
from .queueing import HEALTH_SUSPENDED, Admission

if TYPE_CHECKING:  # the I/O layer's error, for its type only: this module stays pure
    from ..runtime.kube import ApiError

PENDING: Final = "Pending"
PREPARING: Final = "Preparing"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
PHASES = (PENDING, PREPARING, RUNNING, SUCCEEDED, FAILED, SUSPENDED)
TERMINAL = (SUCCEEDED, FAILED)
# The status fields the operator owns: the wire names (aliases) of api.types.LoraRLJobStatus;
# the reporter's are lorarl/reporter/statuskeys.py (tests/operator/test_status_keys.py checks both)
PHASE, OBSERVED_GENERATION, CONDITIONS, RAY_JOB, START_TIME, COMPLETION_TIME = (
    "phase",
    "observedGeneration",
    "conditions",
    "rayJob",
    "startTime",
    "completionTime",
)
GPU_ACCOUNTING, ADAPTER = "gpuAccounting", "adapter"  # adapter: the exported adapter (control/adapter_status.py)
SERVING = "serving"  # where the adapter is served (control/serve_status.py)
OWNED_FIELDS = (PHASE, OBSERVED_GENERATION, CONDITIONS, RAY_JOB, START_TIME, COMPLETION_TIME, GPU_ACCOUNTING, ADAPTER, SERVING)
# ...and one leaf of the reporter's progress: progress.gpuHours, from the pods (control/gpuhours.py)
PROGRESS, GPU_HOURS = "progress", "gpuHours"
OWNED_LEAVES = {PROGRESS: (GPU_HOURS,)}
# condition types (Succeeded, Failed and Suspended are named as the phases)
READY, RECONCILING, STALLED, TRAINING_HEALTHY, ADMITTED = "Ready", "Reconciling", "Stalled", "TrainingHealthy", "Admitted"
RETRYING = "Retrying"  # KubeRay retries the run on a new Ray cluster (runPolicy.backoffLimit)
CONDITION_TYPES = (
    READY,
    RECONCILING,
    STALLED,
    SUCCEEDED,
    FAILED,
    SUSPENDED,
    TRAINING_HEALTHY,
    ADMITTED,
    adapter_status.ADAPTER_EXPORTED,
    serve_status.ADAPTER_SERVED,
)
APPLY_FAILED = "ApplyFailed"
PREEMPTED, WORKLOAD_DEACTIVATED = "Preempted", "WorkloadDeactivated"
MAX_APPLY_MESSAGE = 1024  # an Event's message limit (kube.post_event); conditions keep the same text
# KubeRay's message can carry the job's own text (on AppFailed, the tail of the driver's log):
# what the operator copies into its fields is one short line of it, with anything credential-like
# redacted, and where to read the rest
MAX_RAY_MESSAGE = 200
REDACTED = "[redacted]"
_CREDENTIAL_KEY = re.compile(r"(?i)(key|secret|passw|pwd|credential|auth|bearer|cookie|token)")


@dataclass(frozen=True)
class Observation:
    """What the RayJob says, in LoraRLJob terms."""

    phase: api.Phase
    reason: str
    message: str
    queued: bool = False  # suspended by Kueue, waiting for admission
    stuck: bool = False  # a pod cannot start until someone fixes something (pods.Trouble.stuck)


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str

    def __post_init__(self) -> None:  # text from outside, printable (lorarl.text)
        object.__setattr__(self, "reason", printable(self.reason))
        object.__setattr__(self, "message", printable(self.message))


@dataclass(frozen=True)
class Facts:
    """Everything ``compute`` needs besides the RayJob: all decided by the caller."""

    generation: int
    now: str  # RFC 3339
    user_suspended: bool
    queue_name: str | None
    verdict: Verdict
    startup_timed_out: bool = False
    stopped_unhealthy: bool = False
    invalid_spec: str | None = None  # message when the stored spec fails validation
    apply_failed: str | None = None  # message when the API server refused to write a child
    notes: list[Event] = field(default_factory=list)  # events the caller wants emitted
    health_suspended: bool = False  # stopOnUnhealthy: Suspend is holding the run
    admission: Admission | None = None  # what Kueue says (queued jobs only)
    pod_trouble: pods.Trouble | None = None  # why the Ray cluster's pods do not start (pods.diagnose)
    no_progress: str | None = None  # message when a Running job's reporter has gone quiet (health.no_progress)
    driver_lost: str | None = None  # message when KubeRay says RUNNING but the driver's head is gone (driver.lost)
    node_not_ready: pods.Trouble | None = None  # a running Ray pod's node stopped being Ready (pods.node_not_ready)
    export: adapter_status.ExportState | None = None  # a Succeeded job's export (spec.export; None: none asked)
    serve: serve_status.ServeState | None = None  # its load into a server once exported (spec.serve; None: none asked or not yet)
    saved_adapter: dict[str, Any] | None = None  # a Running job's newest export at a save (spec.export.onSave)


def queue_observation(queue_name: str, adm: Admission | None) -> Observation:
    """A queued job whose RayJob is suspended, in Kueue's words: waiting for admission,
    preempted (and waiting to be re-admitted), or deactivated by someone else."""
    adm = adm or Admission()
    where = f"ClusterQueue {adm.cluster_queue} (LocalQueue {queue_name})" if adm.cluster_queue else f"LocalQueue {queue_name}"
    if not adm.active and adm.deactivated_by is None:
        return Observation(
            PENDING,
            WORKLOAD_DEACTIVATED,
            f"Kueue Workload {adm.workload} is deactivated (spec.active: false) by someone other than the operator"
            + (f": {adm.evicted_message}" if adm.evicted_message else ""),
            queued=True,
        )
    if adm.evicted_reason == "Preempted" or adm.preempted_reason:
        why = adm.evicted_message or f"preempted ({adm.preempted_reason})"
        return Observation(PENDING, PREEMPTED, f"{why}; waiting for {where} to admit it again (the run resumes from the newest checkpoint)", queued=True)
    detail = f": {adm.pending_message}" if adm.pending_message else ""
    return Observation(PENDING, "Queued", f"waiting for Kueue to admit the job in {where}{detail}", queued=True)


def _redacted(words: list[str]) -> list[str]:
    """Token-shaped words, and the value after a credential-like key (`key=v`, `token: v`), redacted."""
    out: list[str] = []
    for word in words:
        core = word.strip("\"'`,;()[]{}<>")
        pair = re.match(r"^([^=:]*)([=:])(.*)$", core)
        if pair and pair[3] and (_CREDENTIAL_KEY.search(pair[1]) or re.search(ACCESS_KEY_SHAPED_VALUE, pair[3])):
            out.append(f"{pair[1]}{pair[2]}{REDACTED}")
        elif re.search(ACCESS_KEY_SHAPED_VALUE, core):
            out.append(REDACTED)
        elif out and out[-1].endswith((":", "=")) and _CREDENTIAL_KEY.search(out[-1]):
            out.append(REDACTED)
        else:
            out.append(word)
    return out


def ray_message(message: str, rayjob_name: str) -> str:
    """KubeRay's message as operator text: its first non-empty line, credential-like words
    redacted, at most MAX_RAY_MESSAGE characters, and where the whole text is."""
    lines = [printable(line).strip() for line in message.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    first = " ".join(_redacted(lines[0].split()))
    cut = len(lines) > 1 or len(first) > MAX_RAY_MESSAGE or first != lines[0]
    if not cut:
        return first
    return f"{first[:MAX_RAY_MESSAGE].rstrip()} ... (the full text: kubectl logs job/{rayjob_name})"


def _retries_used_up(rayjob: dict[str, Any], reason: str) -> str:
    """The words a final failure starts with when KubeRay retried and no retry is left: it fails
    a RayJob for good once ``status.failed`` reaches ``spec.backoffLimit`` + 1, except on
    DeadlineExceeded, which it never retries (rayjob_controller.go:486-524 in v1.5.0). Without
    them a user sees only the last attempt's message and cannot tell that the retries were spent."""
    limit = (rayjob.get("spec") or {}).get("backoffLimit") or 0
    failed = (rayjob.get("status") or {}).get("failed") or 0
    if limit < 1 or failed < limit + 1 or reason == "DeadlineExceeded":
        return ""
    return f"all {failed} attempts failed, no retry left (runPolicy.backoffLimit {limit}); the last: "


def observe(rayjob: dict[str, Any] | None, user_suspended: bool, queue_name: str | None, admission: Admission | None = None) -> Observation:
    """Map KubeRay's jobDeploymentStatus/jobStatus/reason to a phase (table in docs/status.md)."""
    if rayjob is None:
        return Observation(PENDING, "RayJobNotCreated", "the RayJob has not been created yet")
    st = rayjob.get("status") or {}
    deployment = st.get("jobDeploymentStatus") or ""
    job_status = st.get("jobStatus") or ""
    reason = st.get("reason") or ""
    message = ray_message(st.get("message") or "", rayjob["metadata"]["name"])
    if deployment == "":
        if st.get("startTime") or st.get("failed"):
            # KubeRay passes through New ("") on every retry and resume and keeps startTime and
            # the counters (rayjob_controller.go:368-391 in v1.5.0): the RayJob is restarting,
            # not new, so the job stays Preparing instead of flapping back to Pending.
            failed = st.get("failed") or 0
            after = f" after {failed} failed attempt{'s' if failed != 1 else ''}" if failed else ""
            return Observation(PREPARING, "RayClusterRestarting", f"KubeRay is starting a new Ray cluster{after}")
        return Observation(PENDING, "RayJobCreated", "waiting for KubeRay to pick up the RayJob")
    queued = not user_suspended and bool(queue_name) and (admission is None or admission.deactivated_by is None)
    if deployment == "Initializing" and queued and queue_name and (rayjob.get("spec") or {}).get("suspend"):
        # a RayJob created suspended for Kueue passes through Initializing on its way to
        # Suspending (rayjob_controller.go:166-180, 964-981 in v1.5.0) without creating a cluster
        return queue_observation(queue_name, admission)
    if deployment == "Initializing":
        return Observation(PREPARING, "RayClusterInitializing", message or "creating the Ray cluster and downloading inputs")
    if deployment == "Waiting":
        return Observation(PREPARING, "WaitingForSubmission", message or "waiting for the job to be submitted")
    if deployment == "Retrying":
        failed = st.get("failed") or 0
        return Observation(
            PREPARING, RETRYING, f"attempt {failed} failed ({reason or 'unknown reason'}); starting a new Ray cluster" + (f": {message}" if message else "")
        )
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
        if trainer_oom_killed(st) or ray_memory_monitor_killed(st):
            return oom_observation(rayjob["metadata"]["name"], by_ray=not trainer_oom_killed(st))
        return Observation(FAILED, reason or "AppFailed", message or f"the Ray job ended with {job_status or 'an unknown status'}")
    if deployment == "Failed" and (trainer_oom_killed(st) or ray_memory_monitor_killed(st)):
        return oom_observation(rayjob["metadata"]["name"], by_ray=not trainer_oom_killed(st))
    if deployment == "Failed":
        return Observation(FAILED, reason or "Failed", _retries_used_up(rayjob, reason) + (message or "the RayJob failed"))
    if deployment == "ValidationFailed":
        return Observation(FAILED, "ValidationFailed", message or "KubeRay rejected the RayJob spec")
    if deployment in ("Suspending", "Suspended"):
        if queued and queue_name:  # (queued implies a queue name)
            return queue_observation(queue_name, admission)
        return Observation(
            SUSPENDED, deployment, "the Ray cluster is being deleted" if deployment == "Suspending" else "the run is suspended; its Ray cluster is deleted"
        )
    return Observation(PENDING, "UnknownRayJobState", f"unrecognised RayJob jobDeploymentStatus {deployment!r}")


def trainer_oom_killed(rayjob_status: dict[str, Any]) -> bool:
    """The trainer died of the OOM killer: the reporter's last line says so (reporter/oom.py), and
    Ray's message of a failed entrypoint carries the driver log's last 10 lines (Ray 2.55.1
    dashboard/modules/job/job_supervisor.py:440-452, job_log_storage_client.py:15), which
    KubeRay copies into the RayJob's status.message. Only the fixed marker is matched; no word of
    the job's log is copied."""
    return rayjob_status.get("jobStatus") == "FAILED" and any(line.strip().endswith(oom.MARKER) for line in (rayjob_status.get("message") or "").splitlines())


# Ray's memory monitor (in the raylet, on by default: RAY_memory_usage_threshold 0.95, checked every
# 250 ms; Ray's docs, ray-core/scheduling/ray-oom-prevention.rst) kills a worker before the kernel's
# OOM killer would; the job then fails with Ray's fixed words, which KubeRay copies into the RayJob's
# message: "N worker(s) were killed due to the node running low on memory" since Ray 2.55 (seen on
# the real node with Ray 2.55.1, the entrypoint's supervisor killed), "Task was killed ..." before.
# Which of the two acts first is a race of allocation speed against that interval.
_RAY_MEMORY_MONITOR_WORDS = ("were killed due to the node running low on memory", "was killed due to the node running low on memory")


def ray_memory_monitor_killed(rayjob_status: dict[str, Any]) -> bool:
    """The trainer's Ray worker was killed by Ray's memory monitor (only Ray's fixed words matched)."""
    message = rayjob_status.get("message") or ""
    return rayjob_status.get("jobStatus") == "FAILED" and any(words in message for words in _RAY_MEMORY_MONITOR_WORDS)


def oom_observation(rayjob_name: str, by_ray: bool = False) -> Observation:
    killer = "Ray's memory monitor, at RAY_memory_usage_threshold of it" if by_ray else f"the kernel's OOM killer, exit code {oom.SIGKILL_EXIT}"
    return Observation(
        FAILED,
        pods.OOM_KILLED,
        f"the trainer was killed for exceeding the memory limit of its Ray container ({killer}): "
        f"raise spec.hardware.memory or lower the batch; the trainer's output: kubectl logs job/{rayjob_name}",
    )


def rayjob_mirror(rayjob: dict[str, Any] | None) -> api.RayJobMirrorDict | None:
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
        "message": ray_message(st.get("message") or "", rayjob["metadata"]["name"]),
        "succeeded": st.get("succeeded"),
        "failed": st.get("failed"),
    }
    # every string KubeRay wrote (its reason, its statuses, the names) printable too; the keys are
    # the model's, the values KubeRay's as its CRD types them (not checked here)
    return cast(api.RayJobMirrorDict, {k: printable(v) if isinstance(v, str) else v for k, v in mirror.items() if v not in (None, "")})


def setcondition(
    previous: list[dict[str, Any]], type_: str, status: api.ConditionStatus, reason: str, message: str, now: str, generation: int
) -> api.ConditionDict:
    """A condition whose lastTransitionTime changes only when its status flips."""
    old = next((c for c in previous if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    return {
        "type": type_,
        "status": status,
        "reason": printable(reason, 1024),
        "message": printable(message, 32768),
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def _bool(value: bool) -> api.ConditionStatus:
    return "True" if value else "False"


@dataclass(frozen=True)
class Summary:
    """The kstatus-facing verdict: at most one of in_progress and stalled is set."""

    ready: bool
    in_progress: bool
    stalled: bool
    reason: str  # why Ready is what it is (the blocking reason when not ready)
    message: str
    from_health: bool = False  # Stalled because TrainingHealthy is False (already warned)
    ready_because: tuple[str, str] | None = None  # Ready's own reason and message when the others say something else (the export)


def summarize(obs: Observation, facts: Facts) -> Summary:
    """Ready / Reconciling / Stalled in kstatus terms (sigs.k8s.io/cli-utils v0.37.2,
    pkg/kstatus/status): generic.go:50-67 reads the conditions in order, Reconciling=True is
    InProgress and Stalled=True is Failed; otherwise status.go:125-128,154-183 falls back to
    Ready (True: Current, False/Unknown: InProgress). generic.go:73-98 first demands
    status.observedGeneration == metadata.generation. Like kstatus's own rule for a batch Job
    (core.go:528-578: InProgress until started, Current while running and after success,
    Failed on failure), a training run is Current once it trains: the spec asks for a run,
    and a run is what there is. Reconciling=True only while the job is being brought to the
    state its spec asks for; Stalled=True when it cannot get there without a human."""
    phase, verdict = obs.phase, facts.verdict
    if facts.invalid_spec:
        return Summary(False, False, True, "InvalidSpec", facts.invalid_spec)
    if phase == FAILED:
        return Summary(False, False, True, obs.reason, obs.message)
    if phase == SUCCEEDED and facts.export is not None and facts.export.stalled:
        # the run is done (Ready stays True) but its adapter is not out and will not be without a
        # human: kstatus reads Stalled=True as Failed, Argo CD's health check as Degraded
        return Summary(
            True, False, True, adapter_status.EXPORT_FAILED_STALL, f"{facts.export.reason}: {facts.export.message}", ready_because=(obs.reason, obs.message)
        )
    if phase == SUCCEEDED and facts.export is not None and facts.export.status == "Unknown":
        # the run is done, its adapter is being exported: in progress for kstatus and Argo CD
        return Summary(True, True, False, facts.export.reason, facts.export.message, ready_because=(obs.reason, obs.message))
    if phase == SUCCEEDED and facts.serve is not None and facts.serve.stalled:
        # exported, but the server did not take it and will not without a human: as a failed export
        return Summary(
            True, False, True, serve_status.SERVE_FAILED_STALL, f"{facts.serve.reason}: {facts.serve.message}", ready_because=(obs.reason, obs.message)
        )
    if phase == SUCCEEDED and facts.serve is not None and facts.serve.status == "Unknown":
        return Summary(True, True, False, facts.serve.reason, facts.serve.message, ready_because=(obs.reason, obs.message))
    if phase == SUCCEEDED:
        return Summary(True, False, False, obs.reason, obs.message)
    if facts.apply_failed:
        # the API server refused a child (invalid field, RBAC, missing CRD, admission): the
        # job cannot reach its spec until someone fixes that; the next reconcile clears it
        return Summary(False, False, True, APPLY_FAILED, facts.apply_failed)
    if verdict.status == "False":
        # training runs but its numbers say the result cannot be trusted (with
        # stopOnUnhealthy: Suspend the RayJob is suspended for it): a human must look
        return Summary(False, False, True, verdict.reason, verdict.message, from_health=True)
    if obs.reason == WORKLOAD_DEACTIVATED:
        # Kueue will not admit it again until someone re-activates the Workload
        return Summary(False, False, True, obs.reason, obs.message)
    if obs.stuck and not facts.user_suspended:
        # a pod that cannot start as it is (its image, a Secret, its inputs, its memory)
        return Summary(False, False, True, obs.reason, obs.message)
    if facts.driver_lost and phase == RUNNING:
        return Summary(False, False, True, DRIVER_LOST, facts.driver_lost)
    if facts.no_progress and phase == RUNNING:
        return Summary(False, False, True, NO_PROGRESS, facts.no_progress)
    if facts.node_not_ready is not None and phase == RUNNING:
        # not Ready (nothing vouches for the pods), not Stalled: the node may return, or its pods
        # are evicted and the attempt ends on its own
        return Summary(False, True, False, facts.node_not_ready.reason, facts.node_not_ready.message)
    if facts.startup_timed_out and phase in (PENDING, PREPARING) and not obs.queued:
        return Summary(False, False, True, "StartupTimeout", f"not running after the startup timeout: {obs.message}")
    if facts.user_suspended and phase != SUSPENDED:
        return Summary(False, True, False, "SuspendRequested", f"spec.suspend is true; waiting for KubeRay to suspend the RayJob ({obs.reason})")
    if phase == SUSPENDED and not facts.user_suspended:
        return Summary(False, True, False, "Resuming", "spec.suspend is false; waiting for KubeRay to resume the RayJob")
    if phase == SUSPENDED and obs.reason == "Suspending":
        return Summary(False, True, False, obs.reason, obs.message)
    if phase in (PENDING, PREPARING):  # includes Queued (waiting for Kueue) and Retrying
        return Summary(False, True, False, obs.reason, obs.message)
    return Summary(True, False, False, obs.reason, obs.message)  # Running, or Suspended as asked


def decide(previous: dict[str, Any], rayjob: dict[str, Any] | None, facts: Facts) -> Observation:
    """The phase, reason and message of this observation: what the RayJob says, overridden by what
    the operator knows beyond it (the health gate, the pods, a stop, a finished run). Nothing of
    the adapter's export or serving changes them, so the reconcile decides the phase first and
    runs those steps (which depend on it) before ``compute``."""
    prev_phase = previous.get(PHASE)
    obs = observe(rayjob, facts.user_suspended, facts.queue_name, facts.admission)
    if obs.phase == SUSPENDED and facts.health_suspended and not facts.user_suspended:
        obs = Observation(SUSPENDED, HEALTH_SUSPENDED, f"suspended by spec.health.stopOnUnhealthy: {facts.verdict.message}")

    trouble = facts.pod_trouble
    if trouble is not None and obs.phase in (PENDING, PREPARING) and not obs.queued:
        # the pods say more than KubeRay's Initializing: name the pod, the container, the cause
        # (and, in a retry, that an attempt failed and why: the pods' trouble is the next one's)
        message = f"{trouble.message}; {obs.message}" if obs.reason == RETRYING else trouble.message
        obs = Observation(obs.phase, trouble.reason, message, stuck=trouble.stuck)

    if facts.stopped_unhealthy:
        obs = Observation(FAILED, "StoppedUnhealthy", f"stopped because training was unhealthy: {facts.verdict.message}")
    elif prev_phase in TERMINAL and obs.phase not in TERMINAL:
        # a finished run stays finished (its RayJob may be cleaned up or recreated by hand)
        obs = Observation(
            prev_phase,
            condition(previous, SUCCEEDED if prev_phase == SUCCEEDED else FAILED, "reason") or prev_phase,
            condition(previous, READY, "message") or "",
        )
    return obs


def compute(
    previous: dict[str, Any], rayjob: dict[str, Any] | None, facts: Facts, decided: Observation | None = None
) -> tuple[api.OperatorStatusDict, list[Event]]:
    """The operator's status fields and the Events for this observation (``decided``: ``decide``'s
    answer for the same arguments, when the caller has it already)."""
    obs = decided if decided is not None else decide(previous, rayjob, facts)
    prev_phase = previous.get(PHASE)
    phase = obs.phase
    summary = summarize(obs, facts)
    prev_conditions = previous.get(CONDITIONS) or []
    healthy = facts.verdict
    suspended = phase == SUSPENDED or obs.queued
    g, now = facts.generation, facts.now
    conditions = [
        setcondition(prev_conditions, READY, _bool(summary.ready), *(summary.ready_because or (summary.reason, summary.message)), now, g),
        setcondition(
            prev_conditions,
            RECONCILING,
            _bool(summary.in_progress),
            summary.reason if summary.in_progress else phase,
            summary.message if summary.in_progress else "",
            now,
            g,
        ),
        setcondition(
            prev_conditions,
            STALLED,
            _bool(summary.stalled),
            summary.reason if summary.stalled else "NoError",
            summary.message if summary.stalled else "",
            now,
            g,
        ),
        setcondition(
            prev_conditions,
            SUCCEEDED,
            _bool(phase == SUCCEEDED),
            obs.reason if phase in TERMINAL else phase,
            obs.message if phase in TERMINAL else "",
            now,
            g,
        ),
        setcondition(
            prev_conditions, FAILED, _bool(phase == FAILED), obs.reason if phase == FAILED else "NotFailed", obs.message if phase == FAILED else "", now, g
        ),
        setcondition(prev_conditions, SUSPENDED, _bool(suspended), obs.reason if suspended else "NotSuspended", obs.message if suspended else "", now, g),
        setcondition(prev_conditions, TRAINING_HEALTHY, healthy.status, healthy.reason, healthy.message, now, g),
    ]
    if facts.queue_name and facts.admission is not None:
        conditions.append(admitted_condition(prev_conditions, facts.queue_name, facts.admission, obs, now, g))
    export = facts.export if phase == SUCCEEDED else None
    if export is not None:
        conditions.append(setcondition(prev_conditions, adapter_status.ADAPTER_EXPORTED, export.status, export.reason, export.message, now, g))
    serve = facts.serve if phase == SUCCEEDED else None
    if serve is not None:
        conditions.append(setcondition(prev_conditions, serve_status.ADAPTER_SERVED, serve.status, serve.reason, serve.message, now, g))

    out: api.OperatorStatusDict = {
        "phase": phase,
        "observedGeneration": g,
        "conditions": conditions,
    }
    mirror = rayjob_mirror(rayjob)
    if mirror is not None:
        out["rayJob"] = mirror
    start = previous.get(START_TIME) or (now if phase == RUNNING else None)
    if start:
        out["startTime"] = start
    if phase in TERMINAL:
        end = ((rayjob or {}).get("status") or {}).get("endTime")
        out["completionTime"] = previous.get(COMPLETION_TIME) or end or now
    if export is not None and export.adapter is not None:
        out["adapter"] = export.adapter
    elif phase == RUNNING and facts.saved_adapter is not None:
        out["adapter"] = facts.saved_adapter  # the final export's (after Succeeded) replaces it
    if serve is not None and serve.serving is not None:
        out["serving"] = serve.serving

    events = list(facts.notes)
    events += admission_events(prev_conditions, conditions)
    if phase != prev_phase:
        kind = "Warning" if phase == FAILED else "Normal"
        events.append(Event(kind, phase, f"{prev_phase or 'New'} -> {phase}: {obs.reason}: {obs.message}"[:1024]))
    if export is not None and export.status == "True" and condition(previous, adapter_status.ADAPTER_EXPORTED, "status") != "True":
        events.append(Event("Normal", adapter_status.ADAPTER_EXPORTED, export.message[:1024]))
    saved = out.get("adapter") if phase == RUNNING else None
    if saved is not None and (previous.get(ADAPTER) or {}).get("rollout") != saved.get("rollout"):
        events.append(Event("Normal", "AdapterExportedAtSave", f"{saved.get('uri')} ({saved.get('digest')}, rollout {saved.get('rollout')})"[:1024]))
    if serve is not None and serve.status == "True" and condition(previous, serve_status.ADAPTER_SERVED, "status") != "True":
        events.append(Event("Normal", serve_status.ADAPTER_SERVED, serve.message[:1024]))
    if healthy.status == "False" and condition(previous, TRAINING_HEALTHY, "status") != "False":
        events.append(Event("Warning", healthy.reason, healthy.message))
    stalled_now = summary.stalled and condition(previous, STALLED, "status") != "True"
    if summary.reason == APPLY_FAILED:
        # once per distinct refusal (new, or another child/field): the retries post nothing
        if stalled_now or (condition(previous, STALLED, "reason"), condition(previous, STALLED, "message")) != (
            APPLY_FAILED,
            printable(summary.message, 32768),
        ):
            events.append(Event("Warning", APPLY_FAILED, summary.message[:1024]))
    elif stalled_now and phase != FAILED and not summary.from_health:
        events.append(Event("Warning", summary.reason, summary.message[:1024]))
    elif obs.reason in pods.REASONS and not summary.stalled and condition(previous, RECONCILING, "reason") != obs.reason:
        events.append(Event("Warning", obs.reason, obs.message[:1024]))  # waiting on a pod (a full cluster, a volume)
    elif summary.reason == pods.NODE_NOT_READY and condition(previous, RECONCILING, "reason") != summary.reason:
        events.append(Event("Warning", summary.reason, summary.message[:1024]))  # once, when the node goes
    return out, events


def admitted_condition(previous: list[dict[str, Any]], queue_name: str, adm: Admission, obs: Observation, now: str, generation: int) -> api.ConditionDict:
    """``Admitted`` (queued jobs only): True while Kueue admits the Workload, with the
    ClusterQueue; False says why not (Queued, Preempted, Suspended, HealthSuspended,
    WorkloadDeactivated, or WorkloadNotCreated before Kueue made it)."""
    if adm.workload is None:
        return setcondition(
            previous,
            ADMITTED,
            "False",
            "WorkloadNotCreated",
            f"waiting for Kueue to create the Workload of the RayJob (LocalQueue {queue_name})",
            now,
            generation,
        )
    # an evicted Workload keeps Admitted=True until its job has stopped: the eviction is the news
    if adm.deactivated_by is not None:
        return setcondition(
            previous, ADMITTED, "False", adm.deactivated_by, f"the operator deactivated Workload {adm.workload} ({adm.deactivated_by})", now, generation
        )
    if obs.queued:
        return setcondition(previous, ADMITTED, "False", obs.reason, obs.message, now, generation)
    if adm.admitted and adm.evicted_reason is None:
        return setcondition(
            previous, ADMITTED, "True", "Admitted", f"Kueue admitted Workload {adm.workload} in ClusterQueue {adm.cluster_queue}", now, generation
        )
    if adm.evicted_reason is not None:
        return setcondition(
            previous, ADMITTED, "False", adm.evicted_reason, f"Kueue is evicting Workload {adm.workload}: {adm.evicted_message}", now, generation
        )
    return setcondition(
        previous,
        ADMITTED,
        "False",
        "Queued",
        f"Workload {adm.workload} is not admitted yet" + (f": {adm.pending_message}" if adm.pending_message else ""),
        now,
        generation,
    )


def admission_events(previous: list[dict[str, Any]], conditions: list[api.ConditionDict]) -> list[Event]:
    """One Event when Kueue admits the job, one Warning when it is preempted."""
    new = next((c for c in conditions if c["type"] == ADMITTED), None)
    old = next((c for c in previous if c.get("type") == ADMITTED), None)
    if new is None or (old is not None and (old.get("status"), old.get("reason")) == (new["status"], new["reason"])):
        return []
    if new["status"] == "True":
        return [Event("Normal", "Admitted", new["message"][:1024])]
    if new["reason"] == PREEMPTED:
        return [Event("Warning", PREEMPTED, new["message"][:1024])]
    return []


TOO_LARGE_HINT = "; the object is too large to store: a smaller spec (fewer affinity terms, tolerations or arguments) renders a smaller one"


def refusal_text(err: ApiError) -> str:
    """The API server's words of a refused apply (a ``kube.ApiError``), with what to do about an
    object too large to store (issue 35: its 500 or 413 is a refusal, not a retry). For the
    operator's log only: they may quote another object's fields (a 422's values, an admission
    policy's or webhook's text), so status and Events carry ``apply_failure`` instead."""
    return str(err) + (TOO_LARGE_HINT if getattr(err, "too_large", False) else "")


# a sentence of ours per refusal (the server's own words go to the operator's log only)
REFUSAL_SENTENCES = {
    400: "the API server refused the request",
    401: "the operator's credentials were refused",
    403: "the operator may not write it (RBAC, or an admission policy: e.g. an object of that name that no LoraRLJob controls)",
    404: "its kind or namespace does not exist",
    413: "the object is too large to store",
    422: "the API server found it invalid",
}
MAX_FIELDS = 8


def apply_failure(kind: str, namespace: str, name: str, err: ApiError) -> str:
    """The ApplyFailed message of a refused apply (a ``kube.ApiError``): which child, the HTTP
    status and reason, the fields the API server's Status names (details.causes[].field), and a
    sentence of ours. No text of the server's: a 422 quotes the values of the object it refused,
    an admission webhook or policy may quote anything, and a LoraRLJob named after someone else's
    object would read them back through its status and Events (issue 35, point 6). The
    server's words are logged by the operator (``refusal_text``)."""
    status_code = getattr(err, "status", 0)
    head = f"{status_code} {getattr(err, 'reason', '')}".strip()
    if getattr(err, "status_reason", "") and err.status_reason != getattr(err, "reason", ""):
        head += f" ({err.status_reason})"
    text = f"applying {kind} {namespace}/{name}: {head}"
    fields = tuple(getattr(err, "fields", ()) or ())
    if fields:
        text += "; fields: " + ", ".join(fields[:MAX_FIELDS]) + (f" and {len(fields) - MAX_FIELDS} more" if len(fields) > MAX_FIELDS else "")
    if getattr(err, "too_large", False):
        text += TOO_LARGE_HINT
    else:
        text += f"; {REFUSAL_SENTENCES.get(status_code, 'the API server refused it')}"
    text += " (the API server's answer is in the operator's log)"
    return text if len(text) <= MAX_APPLY_MESSAGE else text[: MAX_APPLY_MESSAGE - 3] + "..."


def apply_backoff(retry: int) -> float:
    """Seconds before the work queue retries a job whose child was refused: 5, 10, 20 ...
    capped at 300 (the only retry path: a resync does not cut a backoff short; an edit of the
    job retries at once)."""
    return float(min(300, 5 * 2 ** min(max(retry, 0), 6)))


def condition(status: Mapping[str, Any], type_: str, key: str) -> str | None:
    """A field of one condition in a stored status, or None."""
    for cond in status.get(CONDITIONS) or []:
        if cond.get("type") == type_:
            value = cond.get(key)
            return value if isinstance(value, str) else None  # the CRD's condition fields asked for are strings
    return None


def changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when writing ``new`` (a merge patch) would change the stored status; of the
    reporter's sections only the leaves the operator owns are compared."""
    for k, v in new.items():
        if k in OWNED_LEAVES and isinstance(v, dict):
            if any((previous.get(k) or {}).get(leaf) != value for leaf, value in v.items()):
                return True
        elif previous.get(k) != v:
            return True
    return False
