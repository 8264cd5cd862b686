"""Per-job metrics: a pure mapping from a cached LoraRLJob (its status) to Prometheus samples.

The operator already holds every job's status in its watch cache (``cache.py``); the collector in
``runtime/metrics.py`` calls ``job_samples`` for each cached job when Prometheus scrapes, so the
series exist from the first listing, follow the cache (a deleted job's series go with it) and cost
nothing between scrapes. Labels: ``namespace`` and ``lorarljob`` (the job's name; not ``job``, which is Prometheus' own target label) on every sample,
plus ``phase``/``reason``/``condition``/``status``/``dataset`` where named below. The table with
every metric is in docs/observability.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

from .status import PHASES, TERMINAL
from .times import unix_seconds as parse_time

# name -> (help, where in the status: (section, field)); all gauges, one series per job
VALUES: dict[str, tuple[str, tuple[str, str]]] = {
    "lorarl_job_rollout": ("Rollouts done (status.progress.rollout, counted across attempts).", ("progress", "rollout")),
    "lorarl_job_rollouts_planned": ("Rollouts planned (status.progress.total = spec.rollout.numRollouts).", ("progress", "total")),
    "lorarl_job_progress_percent": ("rollout / planned in percent (status.progress.percent).", ("progress", "percent")),
    "lorarl_job_eta_seconds": ("Estimated seconds to finish at the observed pace (status.progress.etaSeconds).", ("progress", "etaSeconds")),
    "lorarl_job_attempts": ("Attempts so far, this one included (status.progress.attempts).", ("progress", "attempts")),
    "lorarl_job_trained_rollouts": (
        "Rollouts trained by all attempts, retrained ones included (status.progress.trainedRollouts).",
        ("progress", "trainedRollouts"),
    ),
    "lorarl_job_gpu_hours": ("GPU-hours of the job so far (status.progress.gpuHours).", ("progress", "gpuHours")),
    "lorarl_job_reward": ("rollout/raw_reward of the latest rollout (status.metrics.rawReward).", ("metrics", "rawReward")),
    "lorarl_job_logprob_abs_diff": ("Latest train/train_rollout_logprob_abs_diff.", ("metrics", "trainRolloutLogprobAbsDiff")),
    "lorarl_job_logprob_abs_diff_mean": (
        "Mean train/train_rollout_logprob_abs_diff over the lineage (the health signal).",
        ("metrics", "trainRolloutLogprobAbsDiffMean"),
    ),
    "lorarl_job_checkpoint_iteration": (
        "Iteration of the newest complete checkpoint (status.checkpoints.latestIteration).",
        ("checkpoints", "latestIteration"),
    ),
}
PHASE = "lorarl_job_phase"
REASON = "lorarl_job_status_reason"
CONDITION = "lorarl_job_condition"
EVAL = "lorarl_job_eval_score"
SINCE_REPORT = "lorarl_job_seconds_since_report"
CREATED = "lorarl_job_created_timestamp_seconds"
COMPLETED = "lorarl_job_completion_timestamp_seconds"
HELP: dict[str, str] = {name: text for name, (text, _) in VALUES.items()} | {
    PHASE: "1 for the job's phase, 0 for the other five (kube-state-metrics' kube_pod_status_phase shape).",
    REASON: "1, labelled with the phase and the reason of the Ready condition (the blocking reason when not ready).",
    CONDITION: "1 per condition of the job, labelled with its type (condition), status (True, False, Unknown) and reason.",
    EVAL: "Latest score per eval set (label dataset; status.eval[].latest).",
    SINCE_REPORT: "Seconds since the in-job reporter last saw progress (now - status.progress.lastUpdateTime).",
    CREATED: "metadata.creationTimestamp as Unix seconds.",
    COMPLETED: "status.completionTime as Unix seconds (finished jobs only).",
}


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def job_samples(body: dict[str, Any], now: float) -> Iterator[Sample]:
    """Every sample of one job, read from its (whole or compact) cached object."""
    meta, st = body.get("metadata") or {}, body.get("status") or {}
    ids = {"namespace": str(meta.get("namespace", "")), "lorarljob": str(meta.get("name", ""))}
    phase = st.get("phase") or ""
    if phase in PHASES:
        for p in PHASES:
            yield Sample(PHASE, {**ids, "phase": p}, 1.0 if p == phase else 0.0)
    conditions = [c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type")]
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if phase or ready:
        yield Sample(REASON, {**ids, "phase": phase, "reason": str((ready or {}).get("reason") or "")}, 1.0)
    for c in conditions:
        yield Sample(CONDITION, {**ids, "condition": str(c["type"]), "status": str(c.get("status", "")), "reason": str(c.get("reason") or "")}, 1.0)
    for name, (_, (section, field)) in VALUES.items():
        value = _number((st.get(section) or {}).get(field))
        if value is not None:
            yield Sample(name, ids, value)
    for score in st.get("eval") or []:
        value = _number(score.get("latest")) if isinstance(score, dict) else None
        if value is not None:
            yield Sample(EVAL, {**ids, "dataset": str(score.get("name", ""))}, value)
    reported = parse_time((st.get("progress") or {}).get("lastUpdateTime"))
    if reported is not None and phase not in TERMINAL:
        yield Sample(SINCE_REPORT, ids, max(0.0, now - reported))
    created = parse_time(meta.get("creationTimestamp"))
    if created is not None:
        yield Sample(CREATED, ids, created)
    completed = parse_time(st.get("completionTime"))
    if completed is not None:
        yield Sample(COMPLETED, ids, completed)


def expired(body: dict[str, Any], now: float, finished_seconds: float) -> bool:
    """A finished job whose series are dropped: it completed more than ``finished_seconds`` ago."""
    st = body.get("status") or {}
    if st.get("phase") not in TERMINAL:
        return False
    completed = parse_time(st.get("completionTime"))
    return completed is not None and now - completed > finished_seconds


class GpuHoursLedger:
    """The per-namespace GPU-hours counter (chargeback): the increments of every job's
    ``progress.gpuHours`` seen by this process, kept when the job goes.

    A job first seen when this process started (the first listing) is a baseline, not an
    increment: the previous replica counted its hours so far, and ``increase()`` over a counter
    reset would count them twice. A job created after the process started counts from 0. Not
    thread-safe by itself: the collector calls it under its lock."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.seen: dict[tuple[str, str, str], float] = {}  # (namespace, name, uid) -> gpuHours last seen
        self.totals: dict[str, float] = {}

    def observe(self, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        hours = _number(((body.get("status") or {}).get("progress") or {}).get("gpuHours"))
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")))
        if key not in self.seen:
            created = parse_time(meta.get("creationTimestamp"))
            # creationTimestamp has whole seconds: a job created in the second this process
            # started is new (it can have held no GPU for longer than that second)
            self.seen[key] = 0.0 if created is not None and created >= math.floor(self.started) else (hours or 0.0)
            self.totals.setdefault(key[0], 0.0)
        if hours is not None and hours > self.seen[key]:
            self.totals[key[0]] += hours - self.seen[key]
            self.seen[key] = hours

    def forget_except(self, live: set[tuple[str, str, str]]) -> None:
        """Drop what is remembered of jobs that are gone (their hours stay in the totals)."""
        for key in [k for k in self.seen if k not in live]:
            del self.seen[key]


NAMESPACE_GPU_HOURS = "lorarl_namespace_gpu_hours"  # a counter: exposed as ..._total
JOBS = "lorarl_jobs"
HELP[NAMESPACE_GPU_HOURS] = "GPU-hours of the namespace's jobs seen accruing by this replica (chargeback: use increase(); kept when jobs go)."
HELP[JOBS] = "LoraRLJobs in the cache by phase (every cached job, finished ones included)."
COUNTERS = frozenset({NAMESPACE_GPU_HOURS})


class JobMetrics:
    """What a scrape shows of the cached jobs: ``samples(jobs, now)``; finished jobs' series
    stay ``finished_seconds`` after their completion (then only ``lorarl_jobs`` counts them)."""

    def __init__(self, started: float, finished_seconds: float) -> None:
        self.finished_seconds = finished_seconds
        self.ledger = GpuHoursLedger(started)

    def samples(self, jobs: list[dict[str, Any]], now: float) -> Iterator[Sample]:
        counts = dict.fromkeys(PHASES, 0)
        live: set[tuple[str, str, str]] = set()
        for body in jobs:
            meta = body.get("metadata") or {}
            live.add((str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))))
            phase = (body.get("status") or {}).get("phase")
            if phase in counts:
                counts[phase] += 1
            self.ledger.observe(body)
            if not expired(body, now, self.finished_seconds):
                yield from job_samples(body, now)
        self.ledger.forget_except(live)
        for phase, count in counts.items():
            yield Sample(JOBS, {"phase": phase}, float(count))
        for namespace, hours in sorted(self.ledger.totals.items()):
            yield Sample(NAMESPACE_GPU_HOURS, {"namespace": namespace}, hours)
