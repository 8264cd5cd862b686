from lorarl.api.types import HealthSpec
from lorarl.control.health import evaluate


def test_awaiting_metrics():
    assert evaluate(HealthSpec(), {}).status == "Unknown"


def test_recipe_value_is_healthy():
    v = evaluate(HealthSpec(), {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.01232}})
    assert (v.status, v.reason) == ("True", "WithinThresholds")


def test_threshold_crossed():
    v = evaluate(HealthSpec(), {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.031}})
    assert (v.status, v.reason) == ("False", "LogprobDiffTooHigh") and "0.031" in v.message


def test_eval_floor_ignores_pretraining_eval():
    spec = HealthSpec(min_eval_score=0.5)
    base = {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.01}, "progress": {"rollout": 25}}
    pre = {**base, "eval": [{"name": "aime24", "latest": 0.1, "latestRollout": 0, "best": 0.1, "bestRollout": 0}]}
    assert evaluate(spec, pre).status == "True"
    low = {**base, "eval": [{"name": "aime24", "latest": 0.4, "latestRollout": 20, "best": 0.6, "bestRollout": 0}]}
    v = evaluate(spec, low)
    assert (v.status, v.reason) == ("False", "EvalScoreTooLow") and "aime24" in v.message
