"""The controller core: kopf watches feed caches and a keyed queue; worker threads reconcile.

* kopf watches LoraRLJobs and RayJobs labelled ``lorarl.dev/job``. Index handlers put every
  object into ``cache.Caches`` (kopf runs them for the whole initial listing before any other
  handler, so the caches are complete before the first reconcile); event handlers only enqueue
  the job's key. No kopf create/update/resume handlers: they cost annotation patches (progress,
  last-handled configuration) and a second pass per created job; kopf writes nothing now.
* The operator's own writes come back as watch events; those are recognised (the
  resourceVersion the write returned) and enqueue nothing.
* One ``WorkQueue`` keyed by (namespace, name): a key is queued once however many events arrive,
  handled by one worker at a time; time-based checks (the startup deadline, the TTL of a finished
  job) are scheduled for the moment they fall due; a refused apply or an API error backs off per
  key (the one retry path; no kopf TemporaryError, no kopf "Logging" Events).
* ``--resync-seconds``: every unfinished cached job is queued again (respecting a backoff); it
  reconciles from the cache and writes nothing when nothing changed. Finished jobs are not resynced.
* Worker threads (``--workers``, default 32) run the blocking reconcile: see docs/architecture.md
  for the measurement behind threads rather than asyncio.

No finalizer: deleting a LoraRLJob never waits for the operator, and owner references let the
garbage collector remove its children.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import uuid
from typing import Any

import kopf
from prometheus_client import start_http_server

from .api import types as api
from .control import reconcile, status
from .control.cache import Caches
from .control.reconcile import Reconciler, timed
from .control.workqueue import WorkQueue
from .job import render
from .runtime import metrics
from .runtime.events import EventRecorder
from .runtime.kube import Api, ApiError

LORARLJOBS = {"group": api.GROUP, "version": api.VERSION, "plural": api.PLURAL}
RAYJOBS = {"group": "ray.io", "version": "v1", "plural": "rayjobs"}
OWNED = {render.JOB_LABEL: kopf.PRESENT}
log = logging.getLogger("lorarl.controller")
WATCH_HANDLERS = ("cache-jobs", "cache-rayjobs", "observe-job", "observe-rayjob")


def api_connections(workers: int) -> int:
    """Requests the operator may have in flight: one per worker, plus Events and the leader election."""
    return workers + 4


class _NoChangeDetection(kopf.DiffBaseStorage):
    """kopf deep-copies every event's body into an "essence" to detect changes for create/update/
    field handlers (kopf/_core/reactor/processing.py, _detect_causes, even when there are none).
    This operator registers only index and event handlers, which never see that diff; in a
    1,000-job burst the copies were ~18% of the operator's CPU (py-spy --gil). The essence is empty.
    Adding a kopf change handler would need kopf's own storage back."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: Any, essence: Any) -> None:
        return None


class _QuietWatchHandlers(logging.Filter):
    """kopf logs "Handler 'x' succeeded." at INFO after every watch event; for handlers that
    only fill a cache or a queue that is a line per event, and says nothing the reconcile line
    does not."""

    quiet = {f"Handler {handler_id!r} succeeded." for handler_id in WATCH_HANDLERS}

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in self.quiet


class Core:
    """The running controller's parts, under one memo key: kopf keeps a shallow copy of the memo
    for every object it has seen (kopf 1.45 _core/reactor/inventory.py:114), so one key per part
    would cost memory per job."""

    caches: Caches
    reconciler: Reconciler
    recorder: EventRecorder
    queue: WorkQueue
    job_echo: dict[tuple[str, str], bool]  # key -> the last watch event was our own write
    rayjob_echo: dict[tuple[str, str], bool]
    synced: threading.Event
    stopping: threading.Event
    workers: list[threading.Thread]
    resync_thread: threading.Thread
    settings: kopf.OperatorSettings


def object_log(memo: Any, namespace: str, name: str, body: dict[str, Any] | None = None) -> logging.LoggerAdapter:
    """A logger whose lines name the job: kopf's own object logger, so its formatter prints the
    "[namespace/name]" prefix (plain, full) or the ``object`` reference (JSON) exactly as for
    kopf's own lines. The local variant never posts a log line as a Kubernetes Event."""
    ref = body or {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"namespace": namespace, "name": name}}
    return kopf.LocalObjectLogger(body=ref, settings=memo.core.settings)  # type: ignore[arg-type]


def error_backoff(transient: bool) -> Any:
    """Seconds before retrying after an API error: 5xx/429/connection errors soon, others (403,
    422) later; doubling per failure, capped at 5 minutes."""
    base = 1.0 if transient else 30.0
    return lambda n: float(min(300.0, base * 2 ** min(n, 9)))


def run_reconcile(memo: Any, namespace: str, name: str, trigger: str) -> str | None:
    """One reconcile with metrics, a log line and its Events; schedules what comes next
    (a due time, a backoff). The queue guarantees one reconcile per job at a time."""
    key = (namespace, name)
    reconcile_id = uuid.uuid4().hex[:8]
    try:
        outcome, seconds = timed(memo.core.reconciler.reconcile, namespace, name, False)
    except ApiError as err:
        metrics.RECONCILES.labels(trigger, "error").inc()
        delay = memo.core.queue.add_rate_limited(key, "retry", error_backoff(err.transient))
        object_log(memo, namespace, name).warning(
            "reconcile %s (%s) failed: %s; retrying in %gs", reconcile_id, trigger, err, delay,
            extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "error"},
        )
        return None
    metrics.RECONCILES.labels(trigger, "error" if outcome.apply_failed else "ok").inc()
    metrics.RECONCILE_SECONDS.labels(trigger).observe(seconds)
    metrics.CHILDREN_APPLIED.inc(outcome.applied)
    if outcome.status_written:
        metrics.STATUS_WRITES.inc()
    logger = object_log(memo, namespace, name, outcome.body)
    if outcome.deleted:
        logger.info("reconcile %s (%s): ttlSecondsAfterFinished passed; deleted the job, %.3fs", reconcile_id, trigger, seconds,
                    extra={"reconcile_id": reconcile_id, "trigger": trigger, "phase": outcome.phase, "deleted": True, "duration": round(seconds, 6)})
        memo.core.queue.remove(key)
        return outcome.phase
    logger.info(
        "reconcile %s (%s): %s, %d applied, status %s, %.3fs", reconcile_id, trigger,
        f"phase {outcome.phase}" if outcome.body is not None else "the job is gone",
        outcome.applied, "written" if outcome.status_written else "unchanged", seconds,
        extra={"reconcile_id": reconcile_id, "trigger": trigger, "phase": outcome.phase, "applied": outcome.applied,
               "status_written": outcome.status_written, "duration": round(seconds, 6)},
    )
    if outcome.body is None:
        memo.core.queue.remove(key)
        return None
    now = reconcile.utcnow()
    for event in outcome.events:
        try:  # events are best effort: never fail a reconcile for one
            memo.core.recorder.record(outcome.body, event.type, event.reason, event.message,
                                 reconcile.rfc3339(now), now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        except ApiError as err:
            logger.warning("could not post event %s: %s", event.reason, err, extra={"reconcile_id": reconcile_id})
    if outcome.apply_failed:
        delay = memo.core.queue.add_rate_limited(key, "retry", status.apply_backoff)
        logger.warning("reconcile %s (%s): %s; retrying in %gs", reconcile_id, trigger, outcome.apply_failed, delay,
                       extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "apply-failed"})
    else:
        memo.core.queue.forget(key)
        if outcome.requeue_after is not None:
            memo.core.queue.add(key, "timer", after=outcome.requeue_after)
        if outcome.phase in status.TERMINAL:  # its last write is done: keep it compact
            memo.core.caches.settle(key, reconcile.settled_finished)
    return outcome.phase


def _worker(memo: Any) -> None:
    while True:
        item = memo.core.queue.get()
        if item is None:  # shut down
            return
        (namespace, name), trigger = item
        try:
            if not memo.core.stopping.is_set():  # shutting down (maybe handing the lease over): write nothing more
                run_reconcile(memo, namespace, name, trigger)
        except Exception as err:  # keep the worker alive whatever happens
            object_log(memo, namespace, name).exception("reconcile failed: %s", err)
            memo.core.queue.add_rate_limited((namespace, name), "retry", error_backoff(False))
        finally:
            memo.core.queue.done((namespace, name))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.enabled = False  # our Events go through the EventRecorder (aggregated)
    settings.persistence.finalizer = "lorarl.dev/finalizer"  # never added: no deletion handlers
    settings.persistence.diffbase_storage = _NoChangeDetection()
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # no paged listing (settings.watching.chunk_size): kopf handles every page's objects before it
    # asks for the next, and does not fall back to a full list when the continue token expires
    # (410 after etcd's compaction; client-go v0.37.2 tools/pager/pager.go:108-120 does): with 10,000
    # jobs its listing restarted for ever
    # kopf's per-object worker keeps the object's last raw event while it waits for the next one
    # (default 5 s): in a burst that is every new job twice over; our handlers return at once
    queueing = getattr(settings, "queueing", None) or settings.batching  # kopf 1.37 (our lowest) calls it batching
    queueing.idle_timeout = 0.5
    settings.networking.request_timeout = 60
    core = memo.core = Core()
    core.settings = settings  # for object loggers outside kopf's handlers (the workers)
    objects_log = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _QuietWatchHandlers) for f in objects_log.filters):
        objects_log.addFilter(_QuietWatchHandlers())
    core.stopping = threading.Event()
    kube = memo.get("kube") or Api.from_environment(connections=api_connections(int(memo.get("workers", 32))))
    core.caches = Caches()
    core.reconciler = Reconciler(kube, caches=core.caches)
    core.recorder = EventRecorder(kube)
    core.queue = WorkQueue()
    caches = core.caches  # the cache gauges are read when scraped
    metrics.CACHED.labels("LoraRLJob", "whole").set_function(lambda: len(caches.jobs) - caches.jobs.compact_count())
    metrics.CACHED.labels("LoraRLJob", "compact").set_function(caches.jobs.compact_count)
    metrics.CACHED.labels("RayJob", "whole").set_function(lambda: len(caches.rayjobs))
    core.job_echo, core.rayjob_echo = {}, {}
    # kopf calls event handlers only once every indexed kind is listed and indexed: the first
    # call says the caches are complete (with no object at all there is nothing to resync)
    core.synced = threading.Event()
    if memo.get("metrics_port") and not memo.get("metrics_started"):  # `lorarl run` starts it before the election
        start_http_server(int(memo.metrics_port), addr=memo.get("metrics_addr", "0.0.0.0"))
    core.workers = [threading.Thread(target=_worker, args=(memo,), name=f"lorarl-worker-{i}", daemon=True)
                    for i in range(int(memo.get("workers", 32)))]
    for thread in core.workers:
        thread.start()
    core.resync_thread = threading.Thread(target=_resync_loop, args=(memo,), name="lorarl-resync", daemon=True)
    core.resync_thread.start()


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    """Let in-flight reconciles finish and start no new one, so that nothing is written after
    kopf returns (a leader then releases its lease to a successor)."""
    if memo.get("core") is None:
        return
    memo.core.stopping.set()
    memo.core.queue.shutdown()
    memo.core.resync_thread.join(timeout=60)
    for thread in memo.core.workers:  # each finishes the reconcile it is in, then sees the shutdown
        thread.join(timeout=60)


def _watched(memo: Any, namespace: str) -> bool:
    patterns = memo.get("namespaces") or []
    return not patterns or any(fnmatch.fnmatch(namespace, p) for p in patterns)


def _resync_loop(memo: Any) -> None:
    """Queue every unfinished cached job each ``resync_seconds`` (a backstop: it reads the
    cache and writes only what changed), and count jobs by phase. Finished jobs cost nothing."""
    interval = float(memo.get("resync_seconds", 30))
    while not memo.core.stopping.wait(interval):
        if not memo.core.synced.is_set():
            continue  # kopf is still listing: a RayJob not yet cached would look deleted
        counts = {phase: 0 for phase in status.PHASES}
        for body in memo.core.caches.jobs.values():
            meta, job_status = body["metadata"], body.get("status") or {}
            phase = job_status.get("phase")
            if phase in counts:
                counts[phase] += 1
            # finished jobs cost nothing; a generation not yet observed is on its change path
            # (queued by its event, or backing off): the resync leaves both alone
            if (phase not in status.TERMINAL and job_status.get("observedGeneration") == meta.get("generation")
                    and _watched(memo, meta["namespace"])):
                memo.core.queue.add((meta["namespace"], meta["name"]), "resync", respect_backoff=True)
        for phase, count in counts.items():
            metrics.JOBS.labels(phase).set(count)


# -- kopf: caches and triggers (async: they only touch memory, no executor hop) -------------------


@kopf.index(**LORARLJOBS, id="cache-jobs")
async def cache_job(body: kopf.Body, memo: kopf.Memo, namespace: str, name: str, **_: Any) -> None:
    caches, key = memo.core.caches, (namespace, name)
    echo = memo.core.job_echo[key] = caches.jobs.put({k: body[k] for k in body})
    if echo:  # the echo of a finished job's last status write: no reconcile follows to compact it
        caches.settle(key, reconcile.settled_finished)


@kopf.index(**RAYJOBS, labels=OWNED, id="cache-rayjobs")
async def cache_rayjob(body: kopf.Body, memo: kopf.Memo, namespace: str, name: str, **_: Any) -> None:
    memo.core.rayjob_echo[(namespace, name)] = memo.core.caches.rayjobs.put({k: body[k] for k in body})


@kopf.on.event(**LORARLJOBS, id="observe-job")
async def observe_job(type: str, body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A new or changed spec ("change"), the reporter's status patches ("job-event"): reconcile.
    The echo of our own status write changes nothing."""
    memo.core.synced.set()
    key = (namespace, name)
    if memo.core.job_echo.pop(key, False) and type != "DELETED":
        return
    if type == "DELETED":
        memo.core.caches.jobs.delete({k: body[k] for k in body})
        if memo.core.caches.jobs.get(key) is None:
            memo.core.queue.remove(key)
        return
    observed = (body.get("status") or {}).get("observedGeneration")
    memo.core.queue.add(key, "change" if type is None or observed != body["metadata"].get("generation") else "job-event")


@kopf.on.event(**RAYJOBS, labels=OWNED, id="observe-rayjob")
async def observe_rayjob(type: str, body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Mirror the RayJob's status; a deleted RayJob is re-created for an unfinished job. The
    echo of our own apply changes nothing."""
    memo.core.synced.set()
    if memo.core.rayjob_echo.pop((namespace, name), False) and type != "DELETED":
        return
    if type == "DELETED":
        memo.core.caches.rayjobs.delete({k: body[k] for k in body})
    memo.core.queue.add((namespace, body["metadata"]["labels"][render.JOB_LABEL]), "rayjob-event")
