"""Training health: reporter metrics + spec.health thresholds -> the TrainingHealthy verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..api.types import HealthSpec
from ..reporter import statuskeys as K

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    message: str


def evaluate(health: HealthSpec, status: dict[str, Any], eval_names: frozenset[str] | None = None) -> Verdict:
    """Judge the run from what the in-job reporter wrote (status.metrics and status.eval). Only
    eval entries named as the spec names its datasets (``eval_names``) are judged, so the
    verdict's message carries a name from the spec, never text the job made up."""
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
