"""The controller core: our own watches feed caches and a keyed queue; worker threads reconcile.

* ``runtime.informer.Informer`` lists, then watches, LoraRLJobs and the RayJobs labelled ``lorarl.dev/job``
  (one of each per watched namespace, or one of each for the whole cluster). ``Controller.start``
  is kopf's startup handler: it lists the unfinished jobs before it returns (a field selector on
  ``status.phase``), and kopf reports itself started (``/readyz``) then; the finished jobs and
  the RayJobs are listed afterwards, in a thread of their own (why that is safe: ``start``). Why not kopf's own watches: see
  docs/architecture.md ("What kopf does here"): its start-up over N listed objects of an indexed
  kind is O(N^2), and it holds the whole listing decoded at once.
* A listed job that is finished and settled (``reconcile.settled_finished``) is cached as a compact
  stand-in at once and not reconciled: there is nothing left to do for it (a TTL excepted, so a job
  with ``ttlSecondsAfterFinished`` is reconciled, which schedules its deletion). Start-up and
  memory then grow with the jobs that run, not with the jobs that ever ran.
* The operator's own writes come back as watch events; those are recognised (the
  resourceVersion the write returned, or the fingerprint it was to leave) and enqueue nothing.
* One ``WorkQueue`` keyed by (namespace, name): a key is queued once however many events arrive,
  handled by one worker at a time, due keys taken from the namespaces in turn (one tenant's burst
  does not starve another's new job); time-based checks (the startup deadline, the TTL of a finished
  job) are scheduled for the moment they fall due; a refused apply or an API error backs off per
  key (the one retry path).
* ``--resync-seconds``: every unfinished cached job is queued again (respecting a backoff); it
  reconciles from the cache and writes nothing when nothing changed. Finished jobs are not resynced
  (a Succeeded job whose adapter export still runs is: control/adapter_status.exporting).
  Once per ``--repair-seconds`` a job's resync applies every child (``control/repair.py``): the
  children other than the RayJob are not watched, so one deleted or edited by hand comes back then.
* Worker threads (``--workers``, ``control.options.DEFAULT_WORKERS``) run the blocking reconcile: see
  docs/architecture.md for the measurement behind threads rather than asyncio.

kopf runs the process around it, and ``runtime/runner.py`` is the only module that speaks to kopf:
its startup and cleanup handlers call ``start`` and ``stop``, its liveness endpoint shows
``cached``, and it owns the signals and the log format of every line about an object.
No finalizer: deleting a LoraRLJob never waits for the operator, and owner references let the
garbage collector remove its children.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import time
import uuid
from typing import Any

import msgspec

from .api import types as api
from .control import adapter_status, gpuhours, jobmetrics, reconcile, status, times
from .control.cache import Caches, compact_job, key_of
from .control.options import Options
from .control.reconcile import Reconciler, timed
from .control.repair import Repairs
from .control.workqueue import WorkQueue
from .job import export_job, render
from .runtime import metrics, runner
from .runtime.events import EventRecorder
from .runtime.informer import Informer, decode_whole
from .runtime.kube import Api, ApiError
from .serving import serve_job

log = logging.getLogger("lorarl.controller")
RAYJOB_GROUP, RAYJOB_VERSION, RAYJOB_PLURAL = "ray.io", "v1", "rayjobs"
# the jobs listed before the operator is ready (the CRD's selectableFields; field selectors on a
# custom resource take =, == and !=, joined by commas as AND: no "notin")
UNFINISHED_JOBS = ",".join(f"status.phase!={phase}" for phase in status.TERMINAL)
# the adapters' export Jobs (job/export_job.py) and load Jobs (serving/serve_job.py): the operator's own, by their labels
EXPORT_JOBS = f"{render.JOB_LABEL},{render.COMPONENT_LABEL} in ({export_job.COMPONENT},{serve_job.COMPONENT})"


def api_connections(workers: int) -> int:
    """Requests the operator may have in flight: one per worker, the watches, Events and the leader election."""
    return workers + 8


def scopes(namespaces: tuple[str, ...]) -> list[str | None]:
    """The namespaces to list and watch in (None: the whole cluster). A glob matches namespaces
    that may not exist yet, so it is watched cluster-wide and filtered (``watched``)."""
    if not namespaces or any(set(p) & set("*?[") for p in namespaces):
        return [None]
    return list(dict.fromkeys(namespaces))


def watched(patterns: tuple[str, ...], namespace: str) -> bool:
    return not patterns or any(fnmatch.fnmatch(namespace, p) for p in patterns)


def error_backoff(transient: bool, asked: float | None = None) -> Any:
    """Seconds before retrying after an API error: 5xx/429/connection errors soon, others (403,
    422) later; doubling per failure, capped at 5 minutes; never sooner than the server asked
    (``asked``: its Retry-After, once the client's own retries of it ran out)."""
    base = 1.0 if transient else 30.0
    return lambda n: float(max(asked or 0.0, min(300.0, base * 2 ** min(n, 9))))


def _has_ttl(body: dict[str, Any]) -> bool:
    return (body.get("spec") or {}).get("ttlSecondsAfterFinished") is not None


class _PeekMeta(msgspec.Struct):
    namespace: str
    name: str
    uid: str | None = None
    generation: int | None = None
    resourceVersion: str | None = None
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None


class _PeekSpec(msgspec.Struct):
    ttlSecondsAfterFinished: int | None = None


class _PeekStatus(msgspec.Struct):
    phase: str | None = None
    observedGeneration: int | None = None
    completionTime: str | None = None
    progress: dict[str, Any] | None = None
    conditions: list[dict[str, Any]] | None = None
    gpuAccounting: dict[str, Any] | None = None  # a pod still holding GPUs keeps a finished job whole


class _JobPeek(msgspec.Struct):
    """What decides whether a listed job is a stub: the rest of it is skipped, not built."""

    metadata: _PeekMeta
    apiVersion: str | None = None
    kind: str | None = None
    spec: _PeekSpec = msgspec.field(default_factory=_PeekSpec)
    status: _PeekStatus | None = None


_job_peek = msgspec.json.Decoder(_JobPeek)


def decode_job(raw: msgspec.Raw, listed: bool) -> dict[str, Any]:
    """A LoraRLJob as the controller takes it from its informer: a listed job that is finished
    and settled and has no TTL is only its stub (``compact_job``'s form: what ``on_job`` keeps of
    it), built from a typed peek that skips the rest of the object (~6 KiB, more than half of it
    managedFields) instead of decoding it: with 10,000 finished jobs that is most of a listing's
    client time. Everything else, and every watch event, is the whole object."""
    if listed:
        try:
            peek = _job_peek.decode(raw)
        except msgspec.ValidationError:
            return decode_whole(raw)  # not as the schema says: let the whole object speak
        stub = {
            "apiVersion": peek.apiVersion,
            "kind": peek.kind,
            "metadata": {k: v for k, v in msgspec.structs.asdict(peek.metadata).items() if v is not None},
            "status": {k: v for k, v in msgspec.structs.asdict(peek.status).items() if v is not None} if peek.status else {},
        }
        if peek.spec.ttlSecondsAfterFinished is None and reconcile.settled_finished(stub):
            return compact_job(stub)  # the same form as a job compacted later (jobmetrics reads it)
    return decode_whole(raw)


class Controller:
    """The running controller, built whole before kopf starts (``runtime.runner.run``)."""

    def __init__(self, kube: Api, options: Options, settings: runner.Settings) -> None:
        self.options, self.settings, self.kube = options, settings, kube
        self.caches = Caches(rayjobs_listed=False)  # listed after start-up: see start()
        self.reconciler = Reconciler(kube, caches=self.caches, render_settings=options.render)
        self.recorder = EventRecorder(kube)
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self.repairs = Repairs(options.repair_seconds)
        self.stopping = threading.Event()
        self.synced = threading.Event()
        where = scopes(options.namespaces)
        self.job_informers = [
            Informer(
                kube.client, api.GROUP, api.VERSION, api.PLURAL, ns, self.on_job, stopping=self.stopping, decode=decode_job, ready_selector=UNFINISHED_JOBS
            )
            for ns in where
        ]
        self.rayjob_informers = [
            Informer(kube.client, RAYJOB_GROUP, RAYJOB_VERSION, RAYJOB_PLURAL, ns, self.on_rayjob, label_selector=render.JOB_LABEL, stopping=self.stopping)
            for ns in where
        ]
        # the pods of the jobs' Ray clusters, for why one does not start (control/pods.py): listed
        # in their own threads after start-up (no reconcile waits for them), and optional
        self.pod_informers = [Informer(kube.client, "", "v1", "pods", ns, self.on_pod, label_selector=render.JOB_LABEL, stopping=self.stopping) for ns in where]
        # the adapters' export Jobs (a Succeeded job with spec.export): listed after start-up too
        self.export_informers = [
            Informer(kube.client, "batch", "v1", "jobs", ns, self.on_export_job, label_selector=EXPORT_JOBS, stopping=self.stopping) for ns in where
        ]
        self.watchers: list[threading.Thread] = []
        self.workers: list[threading.Thread] = []
        caches = self.caches  # the cache gauges are read when scraped
        metrics.CACHED.labels("LoraRLJob", "whole").set_function(lambda: len(caches.jobs) - caches.jobs.compact_count())
        metrics.CACHED.labels("LoraRLJob", "compact").set_function(caches.jobs.compact_count)
        metrics.CACHED.labels("RayJob", "whole").set_function(lambda: len(caches.rayjobs))
        metrics.CACHED.labels("Pod", "whole").set_function(lambda: len(caches.pods))
        # per-job series, computed from the cache when scraped: present from the first listing
        per_job = jobmetrics.JobMetrics(started=time.time(), finished_seconds=options.finished_metrics_seconds)
        metrics.JOB_METRICS.bind(lambda: per_job.samples(caches.jobs.values(), time.time()), jobmetrics.HELP, jobmetrics.COUNTERS)

    # -- what kopf runs (runtime/runner.py: its startup, cleanup and probe handlers) ------------

    def cached(self) -> dict[str, int]:
        return {"jobs": len(self.caches.jobs), "rayjobs": len(self.caches.rayjobs)}

    def start(self) -> None:
        """List the unfinished jobs, then watch every job, reconcile and resync; list the finished
        jobs and the RayJobs in the background.

        Why no reconcile can act wrongly on what is not listed yet (tests/operator/test_restart_split.py):
        a reconcile reads its job and that job's RayJob (and pods, which are optional anyway).
        * The job: every unfinished job is listed here, and every change of any job after this
          listing comes through the watch, which starts from its resourceVersion. A key that is
          not cached is a finished job not yet backfilled: nothing queues it (its events and
          TTL arrive with it), a new job cannot take its name (the API server refuses the
          create while it exists), and a reconcile that finds no job writes nothing.
        * Its RayJob: until every RayJob is listed (``caches.rayjobs_listed``), one the cache
          lacks is read with a GET (``Reconciler._read``), so an unfinished job's existing RayJob
          is never taken for deleted and re-created, nor a new job's name clash missed. A label
          on a finished job's RayJob (so that only the others are listed before ready) would cost
          a write per finished job and miss every RayJob made before the label existed; KubeRay's
          CRD offers no selectable field. A GET per reconcile during the listing is cheaper.
        Finished jobs are listed before the RayJobs, so a listed RayJob finds its finished owner
        compact and queues nothing."""
        for informer in self.job_informers:
            began = time.monotonic()
            try:
                count = informer.list()
            except Exception as err:  # noqa: BLE001 - kopf retries its startup handler
                raise runner.RetryStart(f"listing {informer.describe} failed: {err}", delay=5) from None
            log.info("listed %d %s%s in %.1fs", count, informer.describe, " (unfinished)" if informer.split else "", time.monotonic() - began)
        self.synced.set()
        # the watches and listings, never waited for at stop (one may block in a read for minutes)
        self.watchers = [
            threading.Thread(target=i.watch, args=(self.stopping,), name=f"lorarl-watch-{i.plural}-{i.namespace or 'all'}", daemon=True)
            for i in self.job_informers
        ]
        self.watchers.append(threading.Thread(target=self._list_the_rest, name="lorarl-watch-backfill", daemon=True))
        self.watchers += [
            threading.Thread(target=self._follow_pods, args=(i,), name=f"lorarl-watch-pods-{i.namespace or 'all'}", daemon=True) for i in self.pod_informers
        ]
        self.watchers.append(threading.Thread(target=self._follow_export_jobs, name="lorarl-watch-export-jobs", daemon=True))
        # the reconciling workers and the resync that feeds them: joined at stop
        self.workers = [threading.Thread(target=self._work, name=f"lorarl-worker-{n}", daemon=True) for n in range(self.options.workers)]
        self.workers.append(threading.Thread(target=self._resync_loop, name="lorarl-resync", daemon=True))
        for thread in (*self.watchers, *self.workers):
            thread.start()

    def _list_the_rest(self) -> None:
        """After start-up: the finished jobs (their TTL, their metrics), then the RayJobs; each
        listing retried until it succeeds, then the RayJobs watched."""
        for informer in self.job_informers:
            began = time.monotonic()
            count = self._until_done(informer.backfill, informer.describe)
            if count is not None:
                log.info("listed %d %s (the rest, after start-up) in %.1fs", count, informer.describe, time.monotonic() - began)
        for informer in self.rayjob_informers:
            began = time.monotonic()
            count = self._until_done(informer.list, informer.describe)
            if count is None:
                return
            log.info("listed %d %s (after start-up) in %.1fs", count, informer.describe, time.monotonic() - began)
        self.caches.rayjobs_listed.set()
        watches = [
            threading.Thread(target=i.watch, args=(self.stopping,), name=f"lorarl-watch-{i.plural}-{i.namespace or 'all'}", daemon=True)
            for i in self.rayjob_informers
        ]
        for thread in watches:
            thread.start()

    def _until_done(self, listing: Any, what: str, without: str | None = None) -> int | None:
        """``listing()``, retried every 5 s while it fails; None once the controller stops, or,
        when ``without`` says what goes without it, once this operator may not list ``what`` (an
        older chart's RBAC: said once)."""
        while not self.stopping.is_set():
            try:
                return listing()
            except Exception as err:  # noqa: BLE001 - the API server is away: retry; a 403 ends it
                if without is not None and getattr(err, "status", None) == 403:
                    log.warning("no access to %s: %s", what, without)
                    return None
                log.warning("listing %s failed, retrying in 5s: %s", what, err)
                self.stopping.wait(5)
        return None

    def stop(self) -> None:
        """Let in-flight reconciles finish and start no new one, so that nothing is written after
        kopf returns (a leader then releases its lease to a successor). The watches are not
        waited for (one may block in a read for minutes); they hand nothing on after this."""
        self.stopping.set()
        self.kube.stopping.set()  # a request waiting out a Retry-After gives up now
        self.queue.shutdown()
        for thread in self.workers:
            thread.join(timeout=60)  # each worker finishes the reconcile it is in

    # -- watch events -> caches and queue ------------------------------------------------------

    def on_job(self, type_: str, body: dict[str, Any], listed: bool) -> None:
        """A new or changed spec ("change"), the reporter's status patches ("job-event"): reconcile.
        The echo of our own status write changes nothing."""
        key = key_of(body)
        if not watched(self.options.namespaces, key[0]):
            return
        jobs = self.caches.jobs
        if type_ == "DELETED":
            jobs.delete(body)
            if jobs.get(key) is None:
                self.queue.remove(key)
                self.repairs.forget(key)
            return
        if listed and reconcile.settled_finished(body) and not _has_ttl(body):
            jobs.put_compact(body, compact_job)  # nothing left to do: no reconcile, no whole copy
            return
        if jobs.put(body):  # our own write's echo: no reconcile follows, so a finished job is compacted here
            self.caches.settle(key, reconcile.settled_finished)
            return
        observed = (body.get("status") or {}).get(status.OBSERVED_GENERATION)
        self.queue.add(key, "change" if listed or observed != body["metadata"].get("generation") else "job-event")

    def on_rayjob(self, type_: str, body: dict[str, Any], listed: bool) -> None:
        """Mirror the RayJob's status; a deleted RayJob is re-created for an unfinished job. The
        echo of our own apply changes nothing."""
        key = key_of(body)
        if not watched(self.options.namespaces, key[0]):
            return
        rayjobs = self.caches.rayjobs
        if type_ == "DELETED":
            cached = rayjobs.get(key) or body  # a re-list reports a deletion by name only
            rayjobs.delete(body)
            body = cached
        elif rayjobs.put(body):
            return
        owner = ((body.get("metadata") or {}).get("labels") or {}).get(render.JOB_LABEL)
        if not owner:
            return
        if listed and type_ != "DELETED" and self.caches.jobs.read((key[0], owner))[1] is False:
            return  # a finished job's RayJob: nothing to do for it
        self.queue.add((key[0], owner), "rayjob-event")

    def _list_until_done(self, informer: Informer, what: str, without: str) -> bool:
        """List ``informer`` (``_until_done``); False when this operator may not list ``what`` or
        is stopping."""
        began = time.monotonic()
        count = self._until_done(informer.list, f"{what} ({informer.describe})", without)
        if count is None:
            return False
        log.info("listed %d %s in %.1fs", count, informer.describe, time.monotonic() - began)
        return True

    def _follow_pods(self, informer: Informer) -> None:
        """List, then watch, the jobs' pods; without the chart's pods RBAC (an older chart) the
        operator runs on without them, saying so once."""
        if not self._list_until_done(informer, "pods", "job status will not name pod-level causes (docs/troubleshooting.md)"):
            return
        self.caches.pods_listed.add(informer.namespace)
        for body in self.caches.jobs.values():  # finished jobs whose pods were still held: count their release
            if gpuhours.recorded_holding(body.get("status") or {}) and (informer.namespace is None or body["metadata"]["namespace"] == informer.namespace):
                self.queue.add(key_of(body), "pod-event")
        informer.watch(self.stopping)

    def _follow_export_jobs(self) -> None:
        """List, then watch, the export Jobs; then queue every job whose export was waiting for
        the listing. Without the chart's jobs RBAC (an older chart) the listing counts as done: an
        export then fails its apply and says so in AdapterExported."""
        for informer in self.export_informers:
            if self._list_until_done(informer, "batch Jobs", "adapters cannot be exported (docs/adapters.md)"):
                threading.Thread(target=informer.watch, args=(self.stopping,), name=f"lorarl-watch-jobs-{informer.namespace or 'all'}", daemon=True).start()
        self.caches.export_jobs_listed.set()
        for body in self.caches.jobs.values():
            if adapter_status.exporting(body.get("status") or {}):
                self.queue.add(key_of(body), "export-event")

    def on_export_job(self, type_: str, body: dict[str, Any], listed: bool) -> None:
        """An export Job changed (its pods' progress, its Complete/Failed condition): its job looks again."""
        key = key_of(body)
        if not watched(self.options.namespaces, key[0]):
            return
        if type_ == "DELETED":
            self.caches.export_jobs.delete(self.caches.export_jobs.get(key) or body)
        elif self.caches.export_jobs.put(body):
            return
        labels = (body.get("metadata") or {}).get("labels") or {}
        owner = labels.get(render.JOB_LABEL)
        if not owner:
            return
        job, whole = self.caches.jobs.read((key[0], owner))
        # a compact job is settled: its export has ended; but an export at a save may end after
        # it, and its Job is then deleted as superseded (reconcile._delete_superseded)
        at_save_ended = export_job.ROLLOUT_LABEL in labels and type_ != "DELETED" and adapter_status.finished(body)
        if job is not None and (whole or at_save_ended):
            self.queue.add((key[0], owner), "export-event")

    def on_pod(self, type_: str, body: dict[str, Any], listed: bool) -> None:
        """A pod of a job's Ray cluster changed: its job looks again (when it is not finished)."""
        key = key_of(body)
        if not watched(self.options.namespaces, key[0]):
            return
        if type_ == "DELETED":
            body = self.caches.pods.get(key) or body  # a re-list reports a deletion by name only
            self.caches.forget_pod(body)  # its last state waits to be counted (GPU-hours)
        else:
            self.caches.pods.put(body)
        owner = ((body.get("metadata") or {}).get("labels") or {}).get(render.JOB_LABEL)
        if not owner:
            return
        job, whole = self.caches.jobs.read((key[0], owner))
        if job is not None and whole:  # a compact job is finished: nothing to report
            self.queue.add((key[0], owner), "pod-event")

    # -- reconciles ------------------------------------------------------------------------------

    def object_log(self, namespace: str, name: str, body: dict[str, Any] | None = None) -> logging.LoggerAdapter:
        """A logger whose lines name the job: kopf's own object logger, so its formatter prints the
        "[namespace/name]" prefix (plain, full) or the ``object`` reference (JSON) exactly as for
        kopf's own lines. The local variant never posts a log line as a Kubernetes Event."""
        ref = body or {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"namespace": namespace, "name": name}}
        return runner.object_logger(ref, self.settings)

    def run_reconcile(self, namespace: str, name: str, trigger: str, repair: bool = False) -> str | None:
        """One reconcile with metrics, a log line and its Events; schedules what comes next
        (a due time, a backoff). The queue guarantees one reconcile per job at a time.
        ``repair``: apply every child, not only those whose render changed (``control/repair.py``)."""
        key = (namespace, name)
        reconcile_id = uuid.uuid4().hex[:8]
        try:
            outcome, seconds = timed(self.reconciler.reconcile, namespace, name, repair)
        except ApiError as err:
            metrics.RECONCILES.labels(trigger, "error").inc()
            delay = self.queue.add_rate_limited(key, "retry", error_backoff(err.transient, err.retry_after))
            self.object_log(namespace, name).warning(
                "reconcile %s (%s) failed: %s; retrying in %gs",
                reconcile_id,
                trigger,
                err,
                delay,
                extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "error"},
            )
            return None
        metrics.RECONCILES.labels(trigger, "error" if outcome.apply_failed else "ok").inc()
        metrics.RECONCILE_SECONDS.labels(trigger).observe(seconds)
        metrics.CHILDREN_APPLIED.inc(outcome.applied)
        if outcome.status_written:
            metrics.STATUS_WRITES.inc()
        logger = self.object_log(namespace, name, outcome.body)
        if outcome.deleted:
            logger.info(
                "reconcile %s (%s): ttlSecondsAfterFinished passed; deleted the job, %.3fs",
                reconcile_id,
                trigger,
                seconds,
                extra={"reconcile_id": reconcile_id, "trigger": trigger, "phase": outcome.phase, "deleted": True, "duration": round(seconds, 6)},
            )
            self.queue.remove(key)
            self.repairs.forget(key)
            return outcome.phase
        logger.info(
            "reconcile %s (%s): %s, %d applied, status %s, %.3fs",
            reconcile_id,
            trigger,
            f"phase {outcome.phase}" if outcome.body is not None else "the job is gone",
            outcome.applied,
            "written" if outcome.status_written else "unchanged",
            seconds,
            extra={
                "reconcile_id": reconcile_id,
                "trigger": trigger,
                "phase": outcome.phase,
                "applied": outcome.applied,
                "status_written": outcome.status_written,
                "duration": round(seconds, 6),
                "repair": repair,
            },
        )
        if outcome.body is None:
            self.queue.remove(key)
            self.repairs.forget(key)
            return None
        now = times.utcnow()
        for event in outcome.events:
            try:  # events are best effort: never fail a reconcile for one
                self.recorder.record(outcome.body, event.type, event.reason, event.message, times.rfc3339(now), now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            except ApiError as err:
                logger.warning("could not post event %s: %s", event.reason, err, extra={"reconcile_id": reconcile_id})
        if outcome.apply_failed:
            delay = self.queue.add_rate_limited(key, "retry", status.apply_backoff)
            logger.warning(
                "reconcile %s (%s): %s; retrying in %gs",
                reconcile_id,
                trigger,
                outcome.apply_failed,
                delay,
                extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "apply-failed"},
            )
        else:
            self.queue.forget(key)
            if repair:
                self.repairs.done(key)
            if outcome.requeue_after is not None:
                self.queue.add(key, "timer", after=outcome.requeue_after)
            if outcome.phase in status.TERMINAL:  # its last write is done: keep it compact
                self.caches.settle(key, reconcile.settled_finished)
                self.repairs.forget(key)  # finished jobs are not resynced, so never repaired
        return outcome.phase

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:  # shut down
                return
            (namespace, name), trigger = item
            try:
                if self.stopping.is_set():  # shutting down (maybe handing the lease over): write nothing more
                    continue
                if trigger == "resync" and self._finished((namespace, name)):
                    continue  # queued before its last write (the resync's snapshot): finished jobs are not resynced (but exporting ones)
                self.run_reconcile(namespace, name, trigger, repair=trigger == "resync" and self.repairs.due((namespace, name)))
            except Exception as err:  # keep the worker alive whatever happens
                self.object_log(namespace, name).exception("reconcile failed: %s", err)
                self.queue.add_rate_limited((namespace, name), "retry", error_backoff(False))
            finally:
                self.queue.done((namespace, name))

    def _finished(self, key: tuple[str, str]) -> bool:
        """Finished and not exporting its adapter (an exporting job is resynced like a running one)."""
        body = self.caches.jobs.get(key)
        job_status = (body or {}).get("status") or {}
        return body is not None and job_status.get(status.PHASE) in status.TERMINAL and not adapter_status.exporting(job_status)

    def _resync_loop(self) -> None:
        """Queue every unfinished cached job each ``resync_seconds`` (a backstop: it reads the
        cache and writes only what changed). Finished jobs cost nothing."""
        while not self.stopping.wait(self.options.resync_seconds):
            for body in self.caches.jobs.values():
                meta, job_status = body["metadata"], body.get("status") or {}
                phase = job_status.get(status.PHASE)
                # finished jobs cost nothing; a generation not yet observed is on its change path
                # (queued by its event, or backing off): the resync leaves both alone
                running = phase not in status.TERMINAL or adapter_status.exporting(job_status)  # an export is followed to its end
                if running and job_status.get(status.OBSERVED_GENERATION) == meta.get("generation"):
                    self.queue.add((meta["namespace"], meta["name"]), "resync", respect_backoff=True)
