"""One level-triggered reconcile of a LoraRLJob: read, decide (pure), write.

Reads come from the watch-fed caches (``cache.Caches``; without them, from GETs), so a call can
run any number of times, after any crash, from any trigger (the LoraRLJob changed, its RayJob
changed, a due time, a periodic resync) and converge, and it writes nothing when nothing changed:

* children are server-side applied under deterministic names (never a duplicate RayJob);
* a RayJob that disappears under an unfinished job is re-created (with checkpoint.resume the
  run continues from its newest checkpoint); a finished job is never re-run;
* a child is applied when its render differs from the digest the RayJob records for it
  (``lorarl.dev/children-digest``: ``Kind=digest,...``; a spec edit, an operator upgrade), so an
  edit that changes no child's render writes no child, and one that changes the RayJob's alone
  applies the RayJob alone (it carries the record, so it is applied whenever any child is); every
  child is applied when the RayJob is missing, its record unreadable, a refused apply is retried,
  or the caller asks (``apply_children``: the controller's periodic repair of children deleted or
  edited by hand, which nothing watches); the RayJob alone when its suspend differs; parsing and
  rendering happen once per job generation (memoised with the caches);
* the status is written as a merge patch of the operator's own fields, only when it changed;
* time-based checks (the startup deadline, ``ttlSecondsAfterFinished``) come back as
  ``Outcome.requeue_after``: the caller schedules the job for that moment instead of polling;
* a Succeeded job with spec.export gets its export ConfigMap and Job once (``_export``: when the
  export Job is missing and no final AdapterExported is written), and AdapterExported and
  status.adapter follow that Job and its pod (``adapter_status``); while it runs the job is not
  settled (the controller keeps following it) and its TTL deletion waits (docs/adapters.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..api import types as api
from ..api.problems import InvalidJob
from ..job import export_job, render
from ..job.settings import RenderSettings
from ..reporter import statuskeys as K
from ..runtime.kube import FIELD_MANAGER as kube_field_manager
from ..runtime.kube import Api, ApiError
from ..serving import serve_job
from . import adapter_status, driver, gpuhours, health, pods, queueing, serve_status, status
from .cache import (
    CHILDREN_DIGEST,
    Caches,
    child_digests,
    decode_digests,
    encode_digests,
    job_fingerprint,
    merge_patch,
    rayjob_fingerprint,
    stale_children,
    whole_job,
)
from .stored import parse_stored
from .times import parse_time, rfc3339, utcnow

log = logging.getLogger("lorarl.reconcile")


def log_refusal(child: dict[str, Any], err: ApiError) -> None:
    """The API server's own words of a refused apply, for whoever reads the operator's log (not
    the job's status or Events: they may quote another object's fields, status.apply_failure)."""
    meta = child["metadata"]
    log.warning("the API server refused %s %s/%s: %s", child["kind"], meta["namespace"], meta["name"], status.refusal_text(err))


SAVED_EXPORT_DELETED = "SavedExportDeleted"  # the Event of an export Job at a save a newer export superseded


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
        meta.get("namespace"),
        meta.get("name"),
        ", ".join(fields),
    )


def suspend_drifted(job: api.LoraRLJob, live_rayjob: dict[str, Any] | None, verdict: health.Verdict) -> bool:
    """The operator's own spec.suspend decision differs from the live RayJob's (never for a
    queued job: Kueue owns that field once the RayJob exists, see queueing.py)."""
    if live_rayjob is None or queueing.queued(job):
        return False
    wanted = queueing.suspend_reason(job, verdict) is not None
    return bool((live_rayjob.get("spec") or {}).get("suspend")) != wanted


def startup_timed_out(job: api.LoraRLJob, rayjob: dict[str, Any] | None, now: datetime.datetime) -> bool:
    """Measured from KubeRay's startTime of the current attempt (it is reset by a resume or a
    retry), else from the RayJob's creation."""
    if rayjob is None:
        return False
    since = parse_time((rayjob.get("status") or {}).get("startTime") or rayjob["metadata"].get("creationTimestamp"))
    return since is not None and (now - since).total_seconds() > job.spec.run_policy.startup_timeout_seconds


def startup_deadline(job: api.LoraRLJob, rayjob: dict[str, Any] | None) -> datetime.datetime | None:
    """When ``startup_timed_out`` turns true for this RayJob (None without a RayJob)."""
    if rayjob is None:
        return None
    since = parse_time((rayjob.get("status") or {}).get("startTime") or rayjob["metadata"].get("creationTimestamp"))
    return None if since is None else since + datetime.timedelta(seconds=job.spec.run_policy.startup_timeout_seconds)


def ttl_expiry(job: api.LoraRLJob, job_status: dict[str, Any]) -> datetime.datetime | None:
    """When a finished job with ``ttlSecondsAfterFinished`` is to be deleted (None: never, or not
    yet known: while its adapter is being exported the deletion waits for the export's end, which
    is an event; the TTL still counts from completionTime)."""
    ttl = job.spec.ttl_seconds_after_finished
    if ttl is None or job_status.get(status.PHASE) not in status.TERMINAL or adapter_status.exporting(job_status):
        return None
    finished = parse_time(job_status.get(status.COMPLETION_TIME))
    return None if finished is None else finished + datetime.timedelta(seconds=ttl)


def training_pods(job_pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's own pods: an export's at a save (spec.export.onSave) may run beside them and is
    not the run's trouble (its Job's pod reports its own)."""
    return [
        p for p in job_pods if ((p.get("metadata") or {}).get("labels") or {}).get(render.COMPONENT_LABEL) not in (export_job.COMPONENT, serve_job.COMPONENT)
    ]


def settled_finished(body: dict[str, Any]) -> bool:
    """A finished job whose every generation was seen: nothing is left for the operator but a
    TTL (which it schedules) and events (which bring the whole object back)."""
    meta, job_status = body.get("metadata") or {}, body.get("status") or {}
    return (
        job_status.get(status.PHASE) in status.TERMINAL
        and job_status.get(status.OBSERVED_GENERATION) == meta.get("generation")
        and not meta.get("deletionTimestamp")
        and not gpuhours.recorded_holding(job_status)  # its pods' release is still to be counted
        and not adapter_status.exporting(job_status)  # its export Job is still to be followed
    )


def next_check(
    job: api.LoraRLJob, rayjob: dict[str, Any] | None, new_status: dict[str, Any], now: datetime.datetime, progress_due: datetime.datetime | None = None
) -> float | None:
    """Seconds until a decision changes with time alone (None: only an event can change it):
    the startup deadline of a job not yet running, the progress deadline of a running one, the
    TTL of a finished one."""
    due = [progress_due] if progress_due is not None and new_status.get(status.PHASE) == status.RUNNING else []
    deadline = startup_deadline(job, rayjob)
    # a startup deadline already past was judged by this reconcile (a queued job past it stays
    # not-stalled until Kueue admits it: an event, not a time, changes that)
    if (
        deadline is not None
        and deadline > now
        and new_status.get(status.PHASE) in (status.PENDING, status.PREPARING)
        and status.condition(new_status, status.STALLED, "reason") != "StartupTimeout"
    ):
        due.append(deadline)
    expiry = ttl_expiry(job, new_status)
    if expiry is not None:  # judged at the start of the next reconcile, even when already past
        due.append(max(expiry, now))
    if not due:
        return None
    # +1 s: the deadline test is "more than N seconds", at whole-second timestamps
    return (min(due) - now).total_seconds() + 1.0


def children_to_apply(
    rendered: dict[str, str],
    rayjob: dict[str, Any] | None,
    *,
    everything: bool,
    suspend_differs: bool,
) -> set[str]:
    """The kinds of the children to apply (pure): every one when ``everything`` or the RayJob is
    missing or its record unreadable; else those whose render differs from the RayJob's record
    (``stale_children``), and the RayJob when its suspend differs."""
    recorded = decode_digests((((rayjob or {}).get("metadata") or {}).get("annotations") or {}).get(CHILDREN_DIGEST))
    if everything or rayjob is None or not recorded:
        return set(rendered)
    stale = stale_children(rendered, recorded)
    if suspend_differs:
        stale.add("RayJob")
    return stale


@dataclass
class Outcome:
    """What a reconcile did: for events, metrics and logs in the controller."""

    body: dict[str, Any] | None  # the LoraRLJob as read (None: gone)
    phase: str | None = None
    events: list[status.Event] = field(default_factory=list)
    applied: int = 0
    status_written: bool = False
    apply_failed: str | None = None  # the API server refused a child: the ApplyFailed message
    requeue_after: float | None = None  # seconds until a time-based check falls due
    deleted: bool = False  # ttlSecondsAfterFinished ran out: the job was deleted


@dataclass
class Pass:
    """What one reconcile knows, read at its start and filled in by its steps in order."""

    body: dict[str, Any]
    previous: dict[str, Any]  # the status as stored
    generation: int
    now: datetime.datetime
    job: api.LoraRLJob
    rayjob: dict[str, Any] | None
    finished: bool  # the stored phase is final: no child is applied, no health judged
    verdict: health.Verdict = health.Verdict("Unknown", "", "")
    quiet: str | None = None  # the reporter has gone quiet (health.no_progress)
    progress_due: datetime.datetime | None = None
    lost: str | None = None  # the driver's head is gone (driver.lost)
    lost_due: datetime.datetime | None = None
    stopped: bool = False  # stopped as unhealthy in this pass
    notes: list[status.Event] = field(default_factory=list)  # Events the steps ask for
    applied: int = 0
    apply_failed: str | None = None  # the API server refused a child: the ApplyFailed message
    admission: queueing.Admission | None = None
    run_pods: list[dict[str, Any]] | None = None


def _parse(body: dict[str, Any]) -> Any:
    try:
        # lenient: the API server admitted this object; never re-judge it by this version's rules
        return parse_stored(whole_job(body))
    except InvalidJob as err:
        return err


@dataclass
class Reconciler:
    kube: Api
    clock: Callable[[], datetime.datetime] = utcnow
    caches: Caches | None = None  # None: read with GETs (tests and one-off tools)
    render_settings: RenderSettings = field(default_factory=RenderSettings)  # `lorarl run`'s (control.options.Options.render)

    def _read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.caches is None:
            return self.kube.get(api_version, kind, namespace, name)
        store = self.caches.jobs if kind == api.KIND else self.caches.rayjobs
        body, whole = store.read((namespace, name))
        if body is not None and not whole:  # a finished job kept compact: the rare reconcile reads it all
            return self.kube.get(api_version, kind, namespace, name)
        if body is None and store is self.caches.rayjobs and not self.caches.rayjobs_listed.is_set():
            # RayJobs are listed after start-up (controller.Controller.start): until then an
            # absent one may exist, and acting on its absence would re-create it
            return self.kube.get(api_version, kind, namespace, name)
        return body

    def _memo(self, which: str, body: dict[str, Any], make: Callable[[], Any]) -> Any:
        if self.caches is None:
            return make()
        meta = body["metadata"]
        return getattr(self.caches, which).get((meta.get("uid"), meta.get("generation")), make)

    def reconcile(self, namespace: str, name: str, apply_children: bool = True) -> Outcome:
        """``apply_children``: apply every child whatever the records say (one-off tools and
        tests; the controller's periodic repair); False: only the children whose render changed.

        One pass is a chain of steps, each owning one concern, in the order the control loop runs
        them (docs/architecture.md, "One reconcile"): read; the health gate; the children (stop an
        unhealthy run, or apply what changed); Kueue; the pods; the phase, decided once; the
        exports at saves; the export and the load after Succeeded; the status, computed once and
        written with the GPU accounting; the next due time."""
        begun = self._begin(namespace, name)
        if isinstance(begun, Outcome):
            return begun
        run = begun
        self._judge_health(run)
        if not self._stop_unhealthy(run):
            self._apply_children(run, everything=apply_children)
        self._follow_queue(run)
        self._read_pods(run)
        facts, decided = self._decide(run)
        facts = self._export_at_saves(run, facts, decided)
        facts = self._export_and_serve(run, facts, decided)
        return self._write(run, facts, decided)

    # -- the steps of one pass, in order -----------------------------------------------------------

    def _begin(self, namespace: str, name: str) -> Pass | Outcome:
        """Read the job and its RayJob; a job that is gone, invalid or past its TTL ends the pass here."""
        body = self._read(api.API_VERSION, api.KIND, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return Outcome(body=None)  # owner references let the garbage collector clean up
        previous = body.get("status") or {}
        generation = body["metadata"].get("generation", 1)
        now = self.clock()
        parsed = self._memo("parsed", body, lambda: _parse(body))
        if isinstance(parsed, InvalidJob):
            return self._write_invalid(body, previous, generation, now, str(parsed))
        job, unknown = parsed
        _report_unknown(body, unknown)
        expiry = ttl_expiry(job, previous)  # None while its export runs: the deletion waits for its end
        if expiry is not None and now >= expiry:
            return self._expire(body, previous)
        rayjob = self._read(render.RAYJOB_API_VERSION, "RayJob", namespace, render.rayjob_name(job))
        return Pass(body, previous, generation, now, job, rayjob, finished=previous.get(status.PHASE) in status.TERMINAL)

    def _judge_health(self, run: Pass) -> None:
        """The health verdict from the reporter's metrics, gated by a quiet reporter (no progress)
        and a lost driver where the spec asks the gate to act on them."""
        job, previous, now = run.job, run.previous, run.now
        run.verdict = health.evaluate(job.spec.health, previous, frozenset(d.name for d in job.spec.eval.datasets))
        if run.finished:
            return
        if previous.get(status.PHASE) == status.RUNNING:
            last_update = parse_time((previous.get(K.PROGRESS) or {}).get(K.LAST_UPDATE_TIME))
            attempt_start = parse_time(((run.rayjob or {}).get("status") or {}).get("startTime"))
            run.quiet, run.progress_due = health.no_progress(job.spec.health, previous, last_update, attempt_start, now)
        if self.caches is not None:  # the pods come from the cache, once listed
            namespace = job.metadata.namespace
            job_pods = self.caches.pods_of(namespace, job.metadata.name) if self.caches.pods_complete(namespace) else None
            run.lost, run.lost_due = driver.lost(run.rayjob, job_pods, now, self.caches.gone_heads(namespace, job.metadata.name))
        run.verdict = health.gated(run.verdict, run.quiet, job.spec.health.stop_on_unhealthy, previous, run.lost)

    def _stop_unhealthy(self, run: Pass) -> bool:
        """spec.health.stopOnUnhealthy: Stop and an unhealthy verdict: the RayJob deleted (its
        cluster with it), and nothing else of the run is followed in this pass."""
        job = run.job
        if run.finished or run.verdict.status != "False" or job.spec.health.stop_on_unhealthy != "Stop":
            return False
        if run.rayjob is not None:
            name = run.rayjob["metadata"]["name"]
            self.kube.delete(render.RAYJOB_API_VERSION, "RayJob", job.metadata.namespace, name, propagation="Foreground")
            run.notes.append(status.Event("Warning", "StoppingUnhealthy", f"deleted RayJob {name}: {run.verdict.message}"))
        run.rayjob, run.stopped = None, True
        run.quiet, run.progress_due, run.lost, run.lost_due = None, None, None, None
        return True

    def _apply_children(self, run: Pass, everything: bool) -> None:
        """The children of an unfinished job (PVC, ConfigMap, RBAC, NetworkPolicy, then the RayJob
        that mounts them), those whose render changed since the RayJob's record (``children_to_apply``);
        a refusal stops the apply there and says which child (``Pass.apply_failed``)."""
        if run.finished:
            return
        job, previous, rayjob = run.job, run.previous, run.rayjob
        namespace = job.metadata.namespace
        rendered: list[render.Children] = []

        def children() -> render.Children:
            if not rendered:
                rendered.append(render.children(job, self.render_settings))
            return rendered[0]

        digests: dict[str, str] = self._memo("digests", run.body, lambda: child_digests(children().in_apply_order()))
        to_apply = children_to_apply(
            digests,
            rayjob,
            everything=everything or status.condition(previous, status.STALLED, "reason") == status.APPLY_FAILED,  # retry until it goes through
            suspend_differs=suspend_drifted(job, rayjob, run.verdict),
        )
        if not to_apply:
            return
        digest = encode_digests(digests)
        if rayjob is None and (previous.get(status.RAY_JOB) or {}).get("name"):
            run.notes.append(
                status.Event(
                    "Warning",
                    "RayJobRecreated",
                    f"RayJob {render.rayjob_name(job)} was deleted while the job was unfinished; re-creating it"
                    + (" (resuming from the newest checkpoint)" if job.spec.checkpoint.resume else ""),
                )
            )
        rendered_children = children()
        rayjob_child, rayjob_manager = queueing.rayjob_apply(rendered_children.rayjob, job, rayjob, run.verdict)
        rayjob_child["metadata"].setdefault("annotations", {})[CHILDREN_DIGEST] = digest  # rayjob_apply copied it: the memoised render stays untouched
        if queueing.queued(job) and rayjob is not None and queueing.owns_suspend(rayjob):
            self._hand_over_suspend(rayjob)
        if self.caches is not None:  # so that the watch event of this apply is known as ours
            rj_meta = (rayjob or {}).get("metadata") or {}
            # a queued RayJob's suspend is Kueue's after creation: the live value stays
            suspend = rayjob_child["spec"].get("suspend", bool(((rayjob or {}).get("spec") or {}).get("suspend")))
            after = {
                "metadata": {**rj_meta, "annotations": {CHILDREN_DIGEST: digest}},
                "spec": {"suspend": suspend},
                "status": (rayjob or {}).get("status"),
            }
            self.caches.rayjobs.expect((namespace, render.rayjob_name(job)), rayjob_fingerprint(after))
        for child in [*rendered_children.before_rayjob, rayjob_child]:  # the RayJob mounts what comes before it
            if child["kind"] not in to_apply:
                continue  # rendered as the RayJob records it
            try:
                is_rayjob = child is rayjob_child  # the one answer read (below)
                result = self.kube.apply(child, field_manager=rayjob_manager if is_rayjob else kube_field_manager, answer=is_rayjob)
            except ApiError as err:
                if not err.needs_fix:
                    raise  # transient: the controller retries soon (backoff)
                meta = child["metadata"]
                run.apply_failed = status.apply_failure(child["kind"], meta["namespace"], meta["name"], err)
                log_refusal(child, err)
                break  # later children depend on earlier ones (the RayJob mounts the ConfigMap)
            run.applied += 1
            if is_rayjob:
                run.rayjob = result
                if self.caches is not None:
                    self.caches.rayjobs.note_own_write(result)

    def _follow_queue(self, run: Pass) -> None:
        """A queued job's Kueue Workload: deactivated or re-activated as decided, and read."""
        if queueing.queued(run.job) and not run.finished and not run.stopped:
            run.admission = self._follow_kueue(run.job, run.rayjob, queueing.suspend_reason(run.job, run.verdict))

    def _read_pods(self, run: Pass) -> None:
        """The current Ray cluster's own pods, from the cache (None: finished, stopped, or no cache)."""
        if run.finished or run.stopped or self.caches is None:
            return
        job = run.job
        cluster = ((run.rayjob or {}).get("status") or {}).get("rayClusterName")
        run.run_pods = pods.current(training_pods(self.caches.pods_of(job.metadata.namespace, job.metadata.name)), cluster)

    def _decide(self, run: Pass) -> tuple[status.Facts, status.Observation]:
        """What the status mapping is told (``status.Facts``), and the phase it decides from it."""
        job, now = run.job, run.now
        facts = status.Facts(
            generation=run.generation,
            now=rfc3339(now),
            user_suspended=job.spec.suspend,
            queue_name=job.spec.scheduling.queue_name,
            verdict=run.verdict,
            startup_timed_out=startup_timed_out(job, run.rayjob, now),
            stopped_unhealthy=run.stopped,
            apply_failed=run.apply_failed,
            notes=run.notes,
            health_suspended=queueing.suspend_reason(job, run.verdict) == queueing.HEALTH_SUSPENDED,
            admission=run.admission,
            no_progress=run.quiet,
            driver_lost=run.lost,
            pod_trouble=None if run.run_pods is None else pods.diagnose(run.run_pods),
            node_not_ready=None if run.run_pods is None else pods.node_not_ready(run.run_pods),
        )
        return facts, status.decide(run.previous, run.rayjob, facts)

    def _export_at_saves(self, run: Pass, facts: status.Facts, decided: status.Observation) -> status.Facts:
        """spec.export.onSave: while Running, each complete save exported by a Job of its own."""
        export = run.job.spec.export
        if decided.phase != status.RUNNING or export is None or not export.on_save or run.stopped:
            return facts
        saved_adapter, refused, deleted = self._export_on_save(run.job, run.body)
        run.apply_failed = run.apply_failed or refused
        if saved_adapter is None and not deleted:
            return facts
        return dataclasses.replace(facts, saved_adapter=saved_adapter, notes=[*run.notes, *deleted])

    def _export_and_serve(self, run: Pass, facts: status.Facts, decided: status.Observation) -> status.Facts:
        """After Succeeded: the export (spec.export), then the load into a server (spec.serve)
        once exported; the exports at saves it superseded deleted."""
        job = run.job
        export = job.spec.export
        if decided.phase != status.SUCCEEDED or export is None or run.stopped:
            return facts
        export_state, refused = self._export(job, run.body, run.previous)
        run.apply_failed = run.apply_failed or refused
        serve_state = None
        if export_state.status == "True" and job.spec.serve is not None:
            serve_state, serve_refused = self._serve(job, run.body, run.previous, export_state)
            run.apply_failed = run.apply_failed or serve_refused
        deleted = self._delete_superseded(job, self._saved_exports(job), final_exported=export_state.status == "True") if export.on_save else []
        return dataclasses.replace(facts, export=export_state, serve=serve_state, notes=[*run.notes, *deleted])

    def _write(self, run: Pass, facts: status.Facts, decided: status.Observation) -> Outcome:
        """The status, computed once, written with the GPU accounting when either changed; the
        time when a decision changes with time alone."""
        previous, now = run.previous, run.now
        new_status, events = status.compute(previous, run.rayjob, facts, decided)
        usage = self._gpu_usage(run.body, previous, now)
        patch: dict[str, Any] = {**new_status}  # what is written: the mapping's fields and the GPU accounting's
        if usage is not None and (usage.due or status.changed(previous, patch)):
            patch.update(usage.fields)  # exact at transitions, else once a minute or with another write
        namespace, name = run.job.metadata.namespace, run.job.metadata.name
        written = self._write_status(namespace, name, previous, patch)
        if written and usage is not None and usage.folded and self.caches is not None:
            self.caches.counted(namespace, name, usage.folded)
        due = [t for t in (run.progress_due, run.lost_due) if t is not None]
        requeue = next_check(run.job, run.rayjob, {**previous, **patch}, now, min(due) if due else None)
        if usage is not None and usage.holding:  # the GPU-hours grow with time alone
            requeue = min(requeue or gpuhours.REFRESH_SECONDS, gpuhours.REFRESH_SECONDS)
        return Outcome(
            body=run.body,
            phase=new_status["phase"],
            events=events,
            applied=run.applied,
            status_written=written,
            apply_failed=run.apply_failed,
            requeue_after=requeue,
        )

    # -- what the steps call ---------------------------------------------------------------------

    def _export(self, job: api.LoraRLJob, body: dict[str, Any], previous: dict[str, Any]) -> tuple[adapter_status.ExportState, str | None]:
        """The export of a Succeeded job: its ConfigMap and Job applied once, then what they say;
        and the message of a refused apply (retried with the apply backoff, the condition stays
        Unknown). A final state already written is kept: the export is never re-run."""
        kept = adapter_status.written_state(previous)
        if kept is not None:
            return kept, None
        namespace, name = job.metadata.namespace, export_job.name(job)
        if self.caches is not None and not self.caches.export_jobs_listed.is_set():
            # until the listing is done an absent Job may exist; the listing queues exporting jobs
            return adapter_status.ExportState("Unknown", adapter_status.EXPORTING, "waiting for the operator to list export Jobs", None, False), None
        # the status the exporter reads (status.history) as stored now, not as parsed for this generation
        current = job.model_copy(update={"status": body.get("status") or {}})
        found, refused = self._one_off_job(namespace, name, lambda: export_job.children(current, self.render_settings))
        if refused is not None:
            return adapter_status.ExportState("Unknown", status.APPLY_FAILED, refused, None, False), refused
        return adapter_status.export_state(found, adapter_status.export_pods(self._pods_of(job))), None

    def _export_on_save(self, job: api.LoraRLJob, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, list[status.Event]]:
        """The exports at each complete save of a running job (spec.export.onSave): an export Job
        of its own for the newest complete save once none runs (``adapter_status.next_save_to_export``);
        returns status.adapter of the newest that succeeded, the message of a refused apply, and the
        Events of the superseded export Jobs deleted (``_delete_superseded``)."""
        if self.caches is not None and not self.caches.export_jobs_listed.is_set():
            return None, None, []
        saved = self._saved_exports(job)
        latest = ((body.get("status") or {}).get("checkpoints") or {}).get("latestIteration")
        rollout = adapter_status.next_save_to_export(saved, latest, job.spec.rollout.num_rollouts)
        refused = None
        if rollout is not None:
            current = job.model_copy(update={"status": body.get("status") or {}})
            found, refused = self._one_off_job(
                job.metadata.namespace, export_job.name(job, rollout), lambda: export_job.children(current, self.render_settings, rollout)
            )
            if found is not None:
                saved[rollout] = found
        deleted = self._delete_superseded(job, saved)
        return adapter_status.newest_saved_adapter(saved, self._pods_of(job)), refused, deleted

    def _saved_exports(self, job: api.LoraRLJob) -> dict[int, dict[str, Any]]:
        """The job's exports at saves, rollout -> Job: from the cache, else listed."""
        namespace = job.metadata.namespace
        if self.caches is not None:
            mine = self.caches.export_jobs_of(namespace, job.metadata.name)
        else:
            mine = self.kube.list("batch/v1", "Job", namespace, f"{render.JOB_LABEL}={job.metadata.name},{export_job.ROLLOUT_LABEL}")
        return adapter_status.saved_exports(mine)

    def _delete_superseded(self, job: api.LoraRLJob, saved: dict[int, dict[str, Any]], final_exported: bool = False) -> list[status.Event]:
        """Delete the export Jobs at saves a newer export superseded (``adapter_status.superseded_saved_exports``;
        their pods with them, Background) and each one's ConfigMap; each by its uid, so a Job
        re-created under that name stays. Removes them from ``saved``; an Event and a log line each.
        Refused (an older chart without the delete rule): logged, the Jobs stay, the reconcile goes on."""
        if self.caches is not None and not self.caches.export_jobs_listed.is_set():
            return []
        namespace = job.metadata.namespace
        notes: list[status.Event] = []
        for gone in adapter_status.superseded_saved_exports(saved, self._pods_of(job), final_exported):
            meta = gone.job["metadata"]
            try:
                deleted = self.kube.delete("batch/v1", "Job", namespace, meta["name"], uid=meta.get("uid"))
                if deleted:  # its ConfigMap (same name) is the one it mounted: the Job was ours, by uid
                    self.kube.delete("v1", "ConfigMap", namespace, meta["name"])
            except ApiError as err:
                if err.status == 409:
                    continue  # the uid precondition: another Job under that name now
                if not err.needs_fix:
                    raise
                log.warning("could not delete the superseded export Job %s/%s: %s", namespace, meta["name"], err)
                return notes
            saved.pop(gone.rollout, None)
            if not deleted:
                continue  # gone already (the cache had not seen it go)
            outcome = {"True": "exported", "False": f"failed, {gone.state.reason}: {gone.state.message}"}.get(gone.state.status, gone.state.reason)
            kept = "the final export succeeded" if final_exported else "kept: rollout " + ", ".join(str(r) for r in sorted(saved))
            message = f"deleted export Job {meta['name']} and its pods (rollout {gone.rollout}, {outcome}); {kept}"
            log.info("%s/%s: %s", namespace, job.metadata.name, message)
            notes.append(status.Event("Normal", SAVED_EXPORT_DELETED, message[:1024]))
        return notes

    def _serve(
        self, job: api.LoraRLJob, body: dict[str, Any], previous: dict[str, Any], exported: adapter_status.ExportState
    ) -> tuple[serve_status.ServeState, str | None]:
        """The load of an exported adapter into the server of spec.serve: its ConfigMap and Job
        applied once, then what they say (as ``_export``). A final state already written is kept:
        the load runs once (docs/adapters.md says how to load again)."""
        kept = serve_status.written_state(previous)
        if kept is not None:
            return kept, None
        namespace, name = job.metadata.namespace, serve_job.name(job)
        if self.caches is not None and not self.caches.export_jobs_listed.is_set():
            return serve_status.ServeState("Unknown", serve_status.LOADING, "waiting for the operator to list load Jobs", None, False), None
        current = job.model_copy(update={"status": {**(body.get("status") or {}), status.ADAPTER: exported.adapter}})
        found, refused = self._one_off_job(namespace, name, lambda: serve_job.children(current, self.render_settings))
        if refused is not None:
            return serve_status.ServeState("Unknown", status.APPLY_FAILED, refused, None, False), refused
        if found is None:  # no children yet: status.adapter names no path the server can load
            return serve_status.waiting_for_path(), None
        return serve_status.serve_state(found, serve_status.load_pods(self._pods_of(job))), None

    def _one_off_job(self, namespace: str, name: str, children: Callable[[], list[dict[str, Any]]]) -> tuple[dict[str, Any] | None, str | None]:
        """A Job the job runs once (the export, the load): the Job as cached (or read), else its
        ``children()`` applied once and the Job as applied (None when there are none); or the
        message of a refused apply (retried with the apply backoff)."""
        found = self.caches.export_jobs.get((namespace, name)) if self.caches is not None else self.kube.get("batch/v1", "Job", namespace, name)
        if found is not None:
            return found, None
        for child in children():
            try:
                answer = self.kube.apply(child, field_manager=kube_field_manager, answer=child["kind"] == "Job")
            except ApiError as err:
                if not err.needs_fix:
                    raise
                meta = child["metadata"]
                log_refusal(child, err)
                return None, status.apply_failure(child["kind"], meta["namespace"], meta["name"], err)
            if child["kind"] == "Job":
                found = answer
        if found is not None and self.caches is not None:
            self.caches.export_jobs.note_own_write(found)
        return found, None

    def _pods_of(self, job: api.LoraRLJob) -> list[dict[str, Any]]:
        """The job's pods (its one-off Jobs' among them): from the cache, else listed."""
        if self.caches is not None:
            return self.caches.pods_of(job.metadata.namespace, job.metadata.name)
        return self.kube.list("v1", "Pod", job.metadata.namespace, f"{render.JOB_LABEL}={job.metadata.name}")

    def _gpu_usage(self, body: dict[str, Any], previous: dict[str, Any], now: datetime.datetime) -> gpuhours.Usage | None:
        """The job's GPU accounting from the pod cache (None without one, or before its listing is complete)."""
        meta = body["metadata"]
        if self.caches is None or not self.caches.pods_complete(meta["namespace"]):
            return None
        pods_now = self.caches.pods_of(meta["namespace"], meta["name"])
        gone = self.caches.gone_pods(meta["namespace"], meta["name"])
        created = parse_time(meta.get("creationTimestamp"))
        return gpuhours.account(previous, pods_now, gone, now.timestamp(), since=created.timestamp() if created else None)

    def _expire(self, body: dict[str, Any], previous: dict[str, Any]) -> Outcome:
        """ttlSecondsAfterFinished ran out: delete the job (the garbage collector takes its
        children); the uid precondition spares a job re-created under the same name."""
        meta = body["metadata"]
        try:
            self.kube.delete(api.API_VERSION, api.KIND, meta["namespace"], meta["name"], uid=meta.get("uid"))
        except ApiError as err:
            if err.status != 409:  # 409: the precondition failed, another job of that name
                raise
        return Outcome(body=body, phase=previous.get(status.PHASE), deleted=True)

    def _hand_over_suspend(self, rayjob: dict[str, Any]) -> None:
        """A queued RayJob whose spec.suspend the operator's manager owns (made by an older
        operator): co-own it by the create manager first, so that dropping it keeps it."""
        try:
            self.kube.apply(queueing.suspend_handoff(rayjob), field_manager=queueing.CREATE_MANAGER, force=False)
        except ApiError as err:
            if err.status != 409:  # 409: Kueue changed it meanwhile, so it owns it already
                raise

    def _follow_kueue(self, job: api.LoraRLJob, rayjob: dict[str, Any] | None, suspend_reason: str | None) -> queueing.Admission:
        """Deactivate / re-activate the job's Workload as the operator decided, and read what
        Kueue says about it. Without Kueue's CRDs (404) the job just stays queued."""
        namespace, queue = job.metadata.namespace, job.spec.scheduling.queue_name
        assert queue is not None  # only a queued job follows Kueue (queueing.queued)
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
            generation=generation,
            now=rfc3339(now),
            user_suspended=False,
            queue_name=None,
            verdict=health.Verdict("Unknown", "InvalidSpec", "the spec is invalid"),
            invalid_spec=message,
        )
        new_status, events = status.compute(previous, None, facts)
        written = self._write_status(meta["namespace"], meta["name"], previous, {**new_status})
        return Outcome(body=body, phase=new_status["phase"], events=events, status_written=written)

    def _write_status(self, namespace: str, name: str, previous: dict[str, Any], new: dict[str, Any]) -> bool:
        if not status.changed(previous, new):
            return False
        # rayJob keys that vanished must be removed explicitly in a merge patch
        if status.RAY_JOB in new and previous.get(status.RAY_JOB):
            new = {**new, status.RAY_JOB: {**{k: None for k in previous[status.RAY_JOB]}, **new[status.RAY_JOB]}}
        if self.caches is not None:  # so that the watch event of this write is known as ours
            cached = self.caches.jobs.get((namespace, name))
            if cached is not None:
                after = {"metadata": cached["metadata"], "status": merge_patch(previous, new)}
                self.caches.jobs.expect((namespace, name), job_fingerprint(after))
        try:
            stored = self.kube.patch_status(api.API_VERSION, api.KIND, namespace, name, new, field_manager=kube_field_manager)
        except ApiError as err:
            if err.status == 404:  # deleted meanwhile
                return False
            raise
        if self.caches is not None and stored.get("metadata"):
            self.caches.jobs.note_own_write(stored)  # its watch event is then known as our echo
        return True


def timed(fn: Callable[..., Outcome], *args: Any, **kwargs: Any) -> tuple[Outcome, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start
