"""kopf handlers: thin triggers around ``Reconciler.reconcile``.

Triggers: a LoraRLJob is created, changed or found at start-up (apply children); any event of a
LoraRLJob (the reporter's status patches: health) or of a RayJob we own (status mirror, a
deleted RayJob); and a resync thread that lists every job each ``resync_seconds`` (startup
timeouts, anything missed). No timers or daemons, so no finalizer: deleting a LoraRLJob never
waits for the operator, and owner references let the garbage collector remove its children.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import uuid
import zlib
from typing import Any, Optional

import kopf
from prometheus_client import start_http_server

from . import api, metrics, reconcile, render, status
from .diffbase import DigestDiffBaseStorage
from .kube import Api, ApiError
from .reconcile import Reconciler, timed

LORARLJOBS = {"group": api.GROUP, "version": api.VERSION, "plural": api.PLURAL}
RAYJOBS = {"group": "ray.io", "version": "v1", "plural": "rayjobs"}
LOCK_STRIPES = 64
log = logging.getLogger("lorarl.controller")


def _lock(memo: Any, namespace: str, name: str) -> threading.Lock:
    """Striped locks (bounded, no per-object state): one reconcile per job at a time, whatever
    the trigger."""
    return memo.locks[zlib.crc32(f"{namespace}/{name}".encode()) % LOCK_STRIPES]


def object_log(memo: Any, namespace: str, name: str, body: Optional[dict[str, Any]] = None) -> logging.LoggerAdapter:
    """A logger whose lines name the job: kopf's own object logger, so its formatter prints the
    "[namespace/name]" prefix (plain, full) or the ``object`` reference (JSON) exactly as for
    kopf's own lines. The local variant never posts a log line as a Kubernetes Event."""
    ref = body or {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"namespace": namespace, "name": name}}
    return kopf.LocalObjectLogger(body=ref, settings=memo.settings)  # type: ignore[arg-type]


def run_reconcile(memo: Any, namespace: str, name: str, trigger: str, apply_children: bool, retry: Optional[int] = None) -> Optional[str]:
    """One reconcile under the job's lock, with metrics, a log line and its Events. ``retry`` is
    kopf's retry count in a change handler: a refused child then raises kopf.TemporaryError with
    a growing delay (other triggers just report it; the next resync tries again)."""
    reconcile_id = uuid.uuid4().hex[:8]
    with _lock(memo, namespace, name):
        if memo.stopping.is_set():  # shutting down (maybe handing the lease over): write nothing more
            return None
        try:
            outcome, seconds = timed(memo.reconciler.reconcile, namespace, name, apply_children)
        except ApiError as err:
            metrics.RECONCILES.labels(trigger, "error").inc()
            object_log(memo, namespace, name).warning(
                "reconcile %s (%s) failed: %s", reconcile_id, trigger, err,
                extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "error"},
            )
            # 5xx/429/connection errors retry soon; others (403, 422) wait for a fix
            raise kopf.TemporaryError(f"reconcile {namespace}/{name}: {err}", delay=5 if err.transient else 30) from None
    metrics.RECONCILES.labels(trigger, "error" if outcome.apply_failed else "ok").inc()
    metrics.RECONCILE_SECONDS.labels(trigger).observe(seconds)
    metrics.CHILDREN_APPLIED.inc(outcome.applied)
    if outcome.status_written:
        metrics.STATUS_WRITES.inc()
    logger = object_log(memo, namespace, name, outcome.body)
    logger.info(
        "reconcile %s (%s): %s, %d applied, status %s, %.3fs", reconcile_id, trigger,
        f"phase {outcome.phase}" if outcome.body is not None else "the job is gone",
        outcome.applied, "written" if outcome.status_written else "unchanged", seconds,
        extra={"reconcile_id": reconcile_id, "trigger": trigger, "phase": outcome.phase, "applied": outcome.applied,
               "status_written": outcome.status_written, "duration": round(seconds, 6)},
    )
    if outcome.body is not None:
        now = reconcile.utcnow()
        for event in outcome.events:
            try:  # events are best effort: never fail a reconcile for one
                memo.reconciler.kube.post_event(
                    outcome.body, event.type, event.reason, event.message,
                    reconcile.rfc3339(now), now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                )
            except ApiError as err:
                logger.warning("could not post event %s: %s", event.reason, err, extra={"reconcile_id": reconcile_id})
    if outcome.apply_failed:
        logger.warning("reconcile %s (%s): %s", reconcile_id, trigger, outcome.apply_failed,
                       extra={"reconcile_id": reconcile_id, "trigger": trigger, "outcome": "apply-failed"})
        if retry is not None:
            raise kopf.TemporaryError(outcome.apply_failed, delay=status.apply_backoff(retry))
    return outcome.phase


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="lorarl.dev")
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix="lorarl.dev", key="last-handled-configuration")
    settings.persistence.finalizer = "lorarl.dev/finalizer"
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.INFO
    settings.execution.max_workers = int(memo.get("max_workers", 8))
    settings.networking.request_timeout = 60
    memo.settings = settings  # for object loggers outside kopf's handlers (the resync thread)
    memo.stopping = threading.Event()
    memo.reconciler = Reconciler(memo.get("kube") or Api.from_environment())
    memo.locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
    if memo.get("metrics_port") and not memo.get("metrics_started"):  # `lorarl run` starts it before the election
        start_http_server(int(memo.metrics_port), addr=memo.get("metrics_addr", "0.0.0.0"))
    memo.stop_resync = threading.Event()
    memo.resync_thread = threading.Thread(target=_resync_loop, args=(memo,), name="lorarl-resync", daemon=True)
    memo.resync_thread.start()


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    """Let in-flight reconciles finish and start no new one, so that nothing is written after
    kopf returns (a leader then releases its lease to a successor)."""
    if memo.get("stopping") is None:
        return
    memo.stopping.set()
    memo.stop_resync.set()
    memo.resync_thread.join(timeout=60)
    for lock in memo.locks:  # each reconcile holds its stripe: taking each once waits for them
        with lock:
            pass


def _resync_loop(memo: Any) -> None:
    """Level-triggered backstop: reconcile every job periodically, and count jobs by phase."""
    interval = float(memo.get("resync_seconds", 30))
    patterns = memo.get("namespaces") or []
    globbing = any(ch in p for p in patterns for ch in "*?[")
    namespaces = patterns if patterns and not globbing else [None]
    while not memo.stop_resync.wait(interval):
        counts = {phase: 0 for phase in status.PHASES}
        for namespace in namespaces:
            if memo.stop_resync.is_set():
                return
            try:
                items = memo.reconciler.kube.list(api.API_VERSION, api.KIND, namespace)
            except ApiError as err:
                log.warning("resync: listing LoraRLJobs failed: %s", err)
                continue
            for item in items:
                meta = item["metadata"]
                if globbing and not any(fnmatch.fnmatch(meta["namespace"], p) for p in patterns):
                    continue
                if memo.stop_resync.is_set():
                    return
                try:
                    phase = run_reconcile(memo, meta["namespace"], meta["name"], "resync", apply_children=False)
                except kopf.TemporaryError:  # already logged by run_reconcile
                    phase = (item.get("status") or {}).get("phase")
                except Exception as err:  # keep the loop alive whatever happens
                    object_log(memo, meta["namespace"], meta["name"], item).exception("resync failed: %s", err)
                    phase = (item.get("status") or {}).get("phase")
                if phase in counts:
                    counts[phase] += 1
        for phase, count in counts.items():
            metrics.JOBS.labels(phase).set(count)


@kopf.on.resume(**LORARLJOBS, id="reconcile-resume")
@kopf.on.create(**LORARLJOBS, id="reconcile-create")
@kopf.on.update(**LORARLJOBS, id="reconcile-update")
def reconcile_job(namespace: str, name: str, memo: kopf.Memo, retry: int, **_: Any) -> None:
    run_reconcile(memo, namespace, name, "change", apply_children=True, retry=retry)


@kopf.on.event(**LORARLJOBS, id="observe-job", when=lambda type, **_: type == "MODIFIED")
def observe_job(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """The reporter patched progress/metrics: re-evaluate health and conditions."""
    run_reconcile(memo, namespace, name, "job-event", apply_children=False)


@kopf.on.event(**RAYJOBS, labels={render.JOB_LABEL: kopf.PRESENT}, id="observe-rayjob")
def observe_rayjob(body: kopf.Body, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    """Mirror the RayJob's status; a deleted RayJob is re-created for an unfinished job."""
    owner = body["metadata"]["labels"][render.JOB_LABEL]
    run_reconcile(memo, namespace, owner, "rayjob-event", apply_children=False)
