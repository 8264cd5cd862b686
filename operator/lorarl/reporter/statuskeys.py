"""The status keys the in-job reporter writes, and the operator's health check reads.

Plain constants (this package runs in the job image: stdlib only); they are the wire names
(aliases) of ``lorarl.api.types.LoraRLJobStatus`` and its parts, the one source of the schema
(tests/operator/test_status_keys.py fails when one is not).
"""

# the reporter's top-level fields (disjoint from the operator's: docs/architecture.md)
PROGRESS, METRICS, EVAL, CHECKPOINTS, TRACKING, HISTORY = "progress", "metrics", "eval", "checkpoints", "tracking", "history"
OWNED_FIELDS = (PROGRESS, METRICS, EVAL, CHECKPOINTS, TRACKING, HISTORY)

# status.progress
ROLLOUT, TOTAL, PERCENT, ATTEMPTS, TRAINED_ROLLOUTS = "rollout", "total", "percent", "attempts", "trainedRollouts"
ETA_SECONDS, LAST_UPDATE_TIME = "etaSeconds", "lastUpdateTime"
GPU_HOURS = "gpuHours"  # the operator's (from the pods); the reporter never writes it (the job-status policy refuses)

# status.metrics
STEP, RAW_REWARD, LOSS, KL = "step", "rawReward", "loss", "kl"
LOGPROB_DIFF, LOGPROB_DIFF_MEAN = "trainRolloutLogprobAbsDiff", "trainRolloutLogprobAbsDiffMean"
RESPONSE_LENGTH_MEAN, TRUNCATED_RATIO = "responseLengthMean", "truncatedRatio"
NON_FINITE = "nonFinite"  # status.metrics.nonFinite[]: {metric, value, since, rollout, streak}
NF_METRIC, NF_VALUE, NF_SINCE, NF_ROLLOUT, NF_STREAK = "metric", "value", "since", "rollout", "streak"

# status.eval[]
EVAL_NAME, EVAL_LATEST, EVAL_LATEST_ROLLOUT, EVAL_BEST, EVAL_BEST_ROLLOUT = "name", "latest", "latestRollout", "best", "bestRollout"

# status.checkpoints, status.tracking
LATEST_ITERATION, LATEST_PATH, COUNT, SAVING = "latestIteration", "latestPath", "count", "saving"
WANDB_RUN_URL = "wandbRunURL"

# status.history (curves of [rollout, value] points), status.history.eval[]
HISTORY_REWARD, HISTORY_LOGPROB_DIFF, HISTORY_EVAL = "reward", "logprobAbsDiff", "eval"
CURVE_NAME, CURVE_POINTS = "name", "points"
