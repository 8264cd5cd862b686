"""One level-triggered reconcile of a LoraRLJob: read, decide (pure), write.

Every call starts from fresh reads, so it can run any number of times, after any crash, from any
trigger (the LoraRLJob changed, its RayJob changed, a periodic resync) and converge:

* children are server-side applied under deterministic names (never a duplicate RayJob);
* a RayJob that disappears under an unfinished job is re-created (with checkpoint.resume the
  run continues from its newest checkpoint); a finished job is never re-run;
* the status is written as a merge patch of the operator's own fields, only when it changed.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import api, health, queueing, render, status
from .kube import FIELD_MANAGER as kube_field_manager
from .kube import Api, ApiError
from .validation import InvalidJob, parse_stored

log = logging.getLogger("lorarl.reconcile")


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 time as the API server and KubeRay write it (``Z`` or an offset, with or
    without fractional seconds), in UTC; None for anything else (never raises)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.strip().upper())
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None  # RFC 3339 requires an offset: a local time is ambiguous
    return moment.astimezone(datetime.timezone.utc)


# Fields of stored jobs this operator does not know (a newer CRD) are reported once per job.
_reported_unknown: dict[str, tuple[str, ...]] = {}
_MAX_REPORTED = 10000


def _report_unknown(body: dict[str, Any], unknown: list[str]) -> None:
    meta = body.get("metadata") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    fields = tuple(sorted(unknown))
    if not fields or _reported_unknown.get(uid) == fields:
        return
    if len(_reported_unknown) >= _MAX_REPORTED:
        _reported_unknown.clear()
    _reported_unknown[uid] = fields
    log.warning(
        "LoraRLJob %s/%s has fields this operator does not know (a newer CRD?); ignoring them: %s",
        meta.get("namespace"), meta.get("name"), ", ".join(fields),
    )


def suspend_drifted(job: api.LoraRLJob, live_rayjob: Optional[dict[str, Any]], verdict: health.Verdict) -> bool:
    """The operator's own spec.suspend decision differs from the live RayJob's (never for a
    queued job: Kueue owns that field once the RayJob exists, see queueing.py)."""
    if live_rayjob is None or queueing.queued(job):
        return False
    wanted = queueing.suspend_reason(job, verdict) is not None
    return bool((live_rayjob.get("spec") or {}).get("suspend")) != wanted


def startup_timed_out(job: api.LoraRLJob, rayjob: Optional[dict[str, Any]], now: datetime.datetime) -> bool:
    """Measured from KubeRay's startTime of the current attempt (it is reset by a resume or a
    retry), else from the RayJob's creation."""
    if rayjob is None:
        return False
    since = parse_time((rayjob.get("status") or {}).get("startTime") or rayjob["metadata"].get("creationTimestamp"))
    return since is not None and (now - since).total_seconds() > job.spec.run_policy.startup_timeout_seconds


@dataclass
class Outcome:
    """What a reconcile did: for events, metrics and logs in the kopf layer."""

    body: Optional[dict[str, Any]]  # the LoraRLJob as read (None: gone)
    phase: Optional[str] = None
    events: list[status.Event] = field(default_factory=list)
    applied: int = 0
    status_written: bool = False
    apply_failed: Optional[str] = None  # the API server refused a child: the ApplyFailed message


@dataclass
class Reconciler:
    kube: Api
    clock: Callable[[], datetime.datetime] = utcnow

    def reconcile(self, namespace: str, name: str, apply_children: bool = True) -> Outcome:
        body = self.kube.get(api.API_VERSION, api.KIND, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return Outcome(body=None)  # owner references let the garbage collector clean up
        previous = body.get("status") or {}
        generation = body["metadata"].get("generation", 1)
        now = self.clock()
        try:
            # lenient: the API server admitted this object; never re-judge it by this version's rules
            job, unknown = parse_stored(body)
        except InvalidJob as err:
            return self._write_invalid(body, previous, generation, now, str(err))
        _report_unknown(body, unknown)

        verdict = health.evaluate(job.spec.health, previous)
        rayjob = self.kube.get(render.RAYJOB_API_VERSION, "RayJob", namespace, render.rayjob_name(job))
        finished = previous.get("phase") in status.TERMINAL
        notes: list[status.Event] = []
        stopped = False
        applied = 0
        apply_failed: Optional[str] = None

        if not finished and verdict.status == "False" and job.spec.health.stop_on_unhealthy == "Stop":
            if rayjob is not None:
                self.kube.delete(render.RAYJOB_API_VERSION, "RayJob", namespace, rayjob["metadata"]["name"], propagation="Foreground")
                notes.append(status.Event("Warning", "StoppingUnhealthy", f"deleted RayJob {rayjob['metadata']['name']}: {verdict.message}"))
            rayjob, stopped = None, True
        elif not finished and (
            apply_children
            or rayjob is None
            or generation != previous.get("observedGeneration")
            or suspend_drifted(job, rayjob, verdict)
            or status.condition(previous, "Stalled", "reason") == status.APPLY_FAILED  # retry until it goes through
        ):
            if rayjob is None and (previous.get("rayJob") or {}).get("name"):
                notes.append(status.Event("Warning", "RayJobRecreated", f"RayJob {render.rayjob_name(job)} was deleted while the job was unfinished; re-creating it" + (" (resuming from the newest checkpoint)" if job.spec.checkpoint.resume else "")))
            children = render.render(job)
            children[-1], rayjob_manager = queueing.rayjob_apply(children[-1], job, rayjob, verdict)
            if queueing.queued(job) and queueing.owns_suspend(rayjob):
                self._hand_over_suspend(rayjob)
            for child in children:
                try:
                    result = self.kube.apply(child, field_manager=rayjob_manager if child["kind"] == "RayJob" else kube_field_manager)
                except ApiError as err:
                    if not err.needs_fix:
                        raise  # transient: kopf retries soon
                    meta = child["metadata"]
                    apply_failed = status.apply_failure(child["kind"], meta["namespace"], meta["name"], str(err))
                    break  # later children depend on earlier ones (the RayJob mounts the ConfigMap)
                applied += 1
                if child["kind"] == "RayJob":
                    rayjob = result

        admission = None
        if queueing.queued(job) and not finished and not stopped:
            admission = self._follow_kueue(job, rayjob, queueing.suspend_reason(job, verdict))
        facts = status.Facts(
            generation=generation,
            now=rfc3339(now),
            user_suspended=job.spec.suspend,
            queue_name=job.spec.scheduling.queue_name,
            verdict=verdict,
            startup_timed_out=startup_timed_out(job, rayjob, now),
            stopped_unhealthy=stopped,
            apply_failed=apply_failed,
            notes=notes,
            health_suspended=queueing.suspend_reason(job, verdict) == queueing.HEALTH_SUSPENDED,
            admission=admission,
        )
        new_status, events = status.compute(previous, rayjob, facts)
        written = self._write_status(job.metadata.namespace, job.metadata.name, previous, new_status)
        return Outcome(body=body, phase=new_status["phase"], events=events, applied=applied, status_written=written, apply_failed=apply_failed)

    def _hand_over_suspend(self, rayjob: dict[str, Any]) -> None:
        """A queued RayJob whose spec.suspend the operator's manager owns (made by an older
        operator): co-own it by the create manager first, so that dropping it keeps it."""
        try:
            self.kube.apply(queueing.suspend_handoff(rayjob), field_manager=queueing.CREATE_MANAGER, force=False)
        except ApiError as err:
            if err.status != 409:  # 409: Kueue changed it meanwhile, so it owns it already
                raise

    def _follow_kueue(self, job: api.LoraRLJob, rayjob: Optional[dict[str, Any]], suspend_reason: Optional[str]) -> queueing.Admission:
        """Deactivate / re-activate the job's Workload as the operator decided, and read what
        Kueue says about it. Without Kueue's CRDs (404) the job just stays queued."""
        namespace, queue = job.metadata.namespace, job.spec.scheduling.queue_name
        workload = None
        if rayjob is not None:
            try:
                listed = self.kube.list(queueing.WORKLOAD_API_VERSION, "Workload", namespace, f"{queueing.JOB_UID_LABEL}={rayjob['metadata']['uid']}")
            except ApiError as err:
                if err.status not in (403, 404):  # no Kueue CRDs, or no RBAC (chart value kueue.enabled)
                    raise
                listed = []
            workload = queueing.find_workload(listed, rayjob)
        patch = queueing.workload_patch(workload, suspend_reason)
        if patch is not None and workload is not None:
            workload = self.kube.merge_patch(queueing.WORKLOAD_API_VERSION, "Workload", namespace, workload["metadata"]["name"], patch)
        local_queue = None
        try:
            local_queue = self.kube.get(queueing.WORKLOAD_API_VERSION, "LocalQueue", namespace, queue)
        except ApiError as err:
            if err.status not in (403, 404):
                raise
        cluster_queue = ((local_queue or {}).get("spec") or {}).get("clusterQueue")
        return queueing.admission(workload, cluster_queue)

    def _write_invalid(self, body: dict[str, Any], previous: dict[str, Any], generation: int, now: datetime.datetime, message: str) -> Outcome:
        meta = body["metadata"]
        facts = status.Facts(
            generation=generation, now=rfc3339(now), user_suspended=False, queue_name=None,
            verdict=health.Verdict("Unknown", "InvalidSpec", "the spec is invalid"), invalid_spec=message,
        )
        new_status, events = status.compute(previous, None, facts)
        written = self._write_status(meta["namespace"], meta["name"], previous, new_status)
        return Outcome(body=body, phase=new_status["phase"], events=events, status_written=written)

    def _write_status(self, namespace: str, name: str, previous: dict[str, Any], new: dict[str, Any]) -> bool:
        if not status.changed(previous, new):
            return False
        # rayJob keys that vanished must be removed explicitly in a merge patch
        if "rayJob" in new and previous.get("rayJob"):
            new = {**new, "rayJob": {**{k: None for k in previous["rayJob"]}, **new["rayJob"]}}
        try:
            self.kube.patch_status(api.API_VERSION, api.KIND, namespace, name, new)
        except ApiError as err:
            if err.status == 404:  # deleted meanwhile
                return False
            raise
        return True


def timed(fn: Callable[..., Outcome], *args: Any, **kwargs: Any) -> tuple[Outcome, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start
