"""Training health: reporter metrics + spec.health thresholds -> the TrainingHealthy verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..api.types import HealthSpec

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
    metrics = status.get("metrics") or {}
    diff = metrics.get("trainRolloutLogprobAbsDiffMean")
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
        started = (status.get("progress") or {}).get("rollout", 0) > 0
        for score in status.get("eval") or []:
            if eval_names is not None and score.get("name") not in eval_names:
                continue
            # the eval before training says nothing about the training: judge later ones only
            if started and score.get("latestRollout", 0) > 0 and score["latest"] < health.min_eval_score:
                return Verdict(
                    "False",
                    "EvalScoreTooLow",
                    f"eval/{score['name']} {score['latest']:.4g} at rollout {score['latestRollout']} < minimum {health.min_eval_score:g}",
                )
    return Verdict("True", "WithinThresholds", f"mean train/train_rollout_logprob_abs_diff {diff:.5g} < {health.max_logprob_abs_diff:g}")
