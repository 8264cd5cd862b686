"""Training health: reporter metrics + spec.health thresholds -> the TrainingHealthy verdict."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from ..api.types import ConditionStatus, HealthSpec
from ..reporter import statuskeys as K
from .driver import DRIVER_LOST

Status = ConditionStatus


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    message: str


NON_FINITE_METRIC = "NonFiniteMetric"
# A metric NaN/inf in this many rollouts in a row is unhealthy; once is not: miles skips the
# optimizer step whose gradient norm is NaN/inf when Megatron's own guard is off (miles
# backends/megatron_utils/model.py:591-600 at 31f1ca9, `--no-check-for-nan-in-loss-and-grad`),
# so one bad batch leaves the weights as they were and the next rollout can be finite again,
# and one NaN reward of a bad sample poisons only that rollout's mean. A run whose weights
# diverged stays NaN: three rollouts in a row tell the two apart within a few rollouts. (With
# the guard on, miles' default (its docs/user-guide/cli-reference.md:249), Megatron raises on a
# NaN gradient, which should end the trainer: AppFailed. Nothing guards a NaN reward.)
NON_FINITE_STREAK = 3
# status key -> the trainer's metric key it is read from (reporter/summary.py WATCHED_FINITE)
WATCHED_SOURCES = {K.RAW_REWARD: "rollout/raw_reward", K.LOSS: "train/loss", K.LOGPROB_DIFF: "train/train_rollout_logprob_abs_diff"}
_NON_FINITE_WORDS = {"NaN": "NaN", "Inf": "+inf", "-Inf": "-inf"}


def non_finite(status: dict[str, Any]) -> Verdict | None:
    """The NonFiniteMetric verdict: a watched metric NaN/inf in NON_FINITE_STREAK rollouts in a
    row (status.metrics.nonFinite, bounded by the CRD: a known key, NaN/Inf/-Inf and two
    integers). The message is the operator's own words: the trainer's key, the rollout."""
    for entry in (status.get(K.METRICS) or {}).get(K.NON_FINITE) or []:
        source, word = WATCHED_SOURCES.get(entry.get(K.NF_METRIC)), _NON_FINITE_WORDS.get(entry.get(K.NF_VALUE))
        streak, since = entry.get(K.NF_STREAK), entry.get(K.NF_SINCE)
        if source is None or word is None or not isinstance(streak, int) or not isinstance(since, int) or streak < NON_FINITE_STREAK:
            continue
        # the streak's first rollout, not its length: the message stays the same while the run
        # stays diverged, so the operator does not rewrite the condition at every rollout
        return Verdict(
            "False",
            NON_FINITE_METRIC,
            f"{source} has been {word} in every rollout since rollout {since} ({NON_FINITE_STREAK} or more in a row, "
            f"status.metrics.{K.NON_FINITE}): training diverged; resume from a checkpoint saved before rollout {since} "
            "with a lower learning rate (docs/troubleshooting.md)",
        )
    return None


def evaluate(health: HealthSpec, status: dict[str, Any], eval_names: frozenset[str] | None = None) -> Verdict:
    """Judge the run from what the in-job reporter wrote (status.metrics and status.eval). Only
    eval entries named as the spec names its datasets (``eval_names``) are judged, so the
    verdict's message carries a name from the spec, never text the job made up."""
    diverged = non_finite(status)
    if diverged is not None:  # first: a NaN diff never reaches the mean, which would say AwaitingMetrics
        return diverged
    metrics = status.get(K.METRICS) or {}
    diff = metrics.get(K.LOGPROB_DIFF_MEAN)
    if diff is None:
        return Verdict("Unknown", "AwaitingMetrics", "no training step reported yet")
    if diff >= health.max_logprob_abs_diff:
        return Verdict(
            "False",
            "LogprobDiffTooHigh",
            f"mean train/train_rollout_logprob_abs_diff {diff:.5g} >= {health.max_logprob_abs_diff:g}: "
            "training and rollout engines disagree (check backends, precision, LoRA sync)",
        )
    if health.min_eval_score is not None:
        started = (status.get(K.PROGRESS) or {}).get(K.ROLLOUT, 0) > 0
        for score in status.get(K.EVAL) or []:
            if eval_names is not None and score.get(K.EVAL_NAME) not in eval_names:
                continue
            # the eval before training says nothing about the training: judge later ones only
            if started and score.get(K.EVAL_LATEST_ROLLOUT, 0) > 0 and score[K.EVAL_LATEST] < health.min_eval_score:
                return Verdict(
                    "False",
                    "EvalScoreTooLow",
                    f"eval/{score[K.EVAL_NAME]} {score[K.EVAL_LATEST]:.4g} at rollout {score[K.EVAL_LATEST_ROLLOUT]} < minimum {health.min_eval_score:g}",
                )
    # the value itself is in status.metrics: a message quoting it would change with every reporter
    # update and make the operator write again (a second line per update in `kubectl get -w`)
    return Verdict(
        "True", "WithinThresholds", f"mean train/train_rollout_logprob_abs_diff < {health.max_logprob_abs_diff:g} (status.metrics.{K.LOGPROB_DIFF_MEAN})"
    )


MIN_PROGRESS_TIMEOUT, UNKNOWN_PACE_TIMEOUT, PACE_FACTOR = 1800, 3600, 10
NO_PROGRESS = "NoProgress"


def progress_timeout(health: HealthSpec, status: dict[str, Any]) -> int:
    """spec.health.progressTimeoutSeconds, else 10x the pace the reporter observed (its ETA over
    the rollouts left), at least 30 minutes; an hour before the pace is known."""
    if health.progress_timeout_seconds is not None:
        return health.progress_timeout_seconds
    progress = status.get(K.PROGRESS) or {}
    left = (progress.get(K.TOTAL) or 0) - (progress.get(K.ROLLOUT) or 0)
    eta = progress.get(K.ETA_SECONDS)
    if not eta or left <= 0:
        return UNKNOWN_PACE_TIMEOUT
    return max(MIN_PROGRESS_TIMEOUT, int(PACE_FACTOR * eta / left))


def no_progress(
    health: HealthSpec, status: dict[str, Any], last_update: datetime.datetime | None, attempt_start: datetime.datetime | None, now: datetime.datetime
) -> tuple[str | None, datetime.datetime | None]:
    """(the NoProgress message, or None; when to judge again). Measured from the reporter's last
    update or the current attempt's start (KubeRay's startTime: a retry starts the clock again),
    whichever is later; only the caller knows the job is Running."""
    since = max((t for t in (last_update, attempt_start) if t is not None), default=None)
    if since is None:
        return None, None
    limit = progress_timeout(health, status)
    due = since + datetime.timedelta(seconds=limit)
    if now < due:
        return None, due
    quiet = int((now - since).total_seconds())
    return (
        f"no progress reported for {quiet}s while Running (limit {limit}s, spec.health.progressTimeoutSeconds): "
        "the trainer may hang; lorarl logs shows its last lines"
    ), None


def gated(verdict: Verdict, quiet: str | None, policy: str, previous: dict[str, Any], lost: str | None = None) -> Verdict:
    """NoProgress and DriverLost (``lost``: driver.lost's message) under the health gate's policy
    (``spec.health.stopOnUnhealthy``): with Suspend or Stop such a run is unhealthy
    (TrainingHealthy=False with that reason), so the gate suspends or stops it as it does for bad
    numbers. A run suspended for it cannot report (nor has a driver), so the verdict stays until
    the policy changes (as a LogprobDiffTooHigh one stays with its metrics)."""
    if policy == "Never" or verdict.status == "False":
        return verdict
    if lost:  # the more precise: a run without a driver reports nothing either
        return Verdict("False", DRIVER_LOST, lost)
    if quiet:
        return Verdict("False", NO_PROGRESS, quiet)
    old: dict[str, Any] = next((c for c in previous.get("conditions") or [] if c.get("type") == "TrainingHealthy"), {})
    if policy == "Suspend" and old.get("status") == "False" and old.get("reason") in (NO_PROGRESS, DRIVER_LOST):
        return Verdict("False", old["reason"], old.get("message") or f"{old['reason']} while Running")
    return verdict
