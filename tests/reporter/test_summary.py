"""Summary: folding events into the owned status fields (pure; the clock is injected)."""

from __future__ import annotations

import json
import math
import re

import pytest
from lorarl_dev import mileslog

from tests.reporter.reporter_testlib import BASE_TIME, expected_final_status, generate_miles_log, strip_nulls, without_time

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def fold(reporter, summary, lines, clock=None, times=None):
    changes = 0
    for i, line in enumerate(lines):
        if clock is not None:
            clock.now = BASE_TIME.timestamp() + times[i]
        for segment in line.rstrip(b"\n").split(b"\r"):
            event = reporter.parse_line(segment)
            if event is not None:
                changes += summary.apply(event)
    return changes


def test_generated_log_folds_into_the_expected_final_status(reporter, miles_log, tmp_path):
    clock = Clock()
    summary = reporter.Summary(miles_log.num_rollouts, clock=clock)
    fold(reporter, summary, miles_log.lines, clock, miles_log.line_times)
    mileslog.write_tree(str(tmp_path), miles_log.saves, ranks=8)
    summary.apply_scan(reporter.scan([reporter.SaveDir(1, str(tmp_path), 0)], 8), str(tmp_path))
    status = summary.status()
    assert without_time(status) == expected_final_status(miles_log)
    assert status["checkpoints"]["latestPath"] == str(tmp_path / "iter_0000299" / "adapter")
    assert "kl" not in status["metrics"]  # the last ppo_kl is nan: dropped, not sent
    assert RFC3339.match(status["progress"]["lastUpdateTime"])
    json.dumps(status, allow_nan=False)


def test_log_alone_proves_saves_by_later_lines(reporter, miles_log):
    """Without a save directory, a save counts once a later rollout's line (or 'eval <id>')
    appeared. 299 is followed by eval 299; with 290 rollouts the last save has no such line and
    stays 'saving' (the job always passes --save-dir, whose files prove it)."""
    summary = reporter.Summary(miles_log.num_rollouts, clock=Clock())
    fold(reporter, summary, miles_log.lines)
    assert summary.status()["checkpoints"] == {"latestIteration": 299, "latestPath": f"{miles_log.save_dir}/iter_0000299/adapter", "count": 6}
    log = generate_miles_log(num_rollouts=290, noise=False)
    summary = reporter.Summary(290, clock=Clock())
    fold(reporter, summary, log.lines)
    assert summary.status()["checkpoints"] == {"latestIteration": 249, "latestPath": f"{log.save_dir}/iter_0000249/adapter", "count": 5, "saving": 289}


def test_eta_and_progress_midway(reporter, miles_log):
    clock = Clock()
    summary = reporter.Summary(miles_log.num_rollouts, clock=clock)
    k = 120  # stop right after the step line of rollout k
    end = miles_log.step_line[k] + 1
    fold(reporter, summary, miles_log.lines[:end], clock, miles_log.line_times)
    progress = summary.status()["progress"]
    t0 = miles_log.line_times[miles_log.step_line[0]]
    tk = miles_log.line_times[miles_log.step_line[k]]
    remaining = miles_log.num_rollouts - (k + 1)
    assert progress["rollout"] == k + 1
    assert progress["percent"] == (k + 1) * 100 // miles_log.num_rollouts
    assert progress["etaSeconds"] == round((tk - t0) / k * remaining)
    assert progress["lastUpdateTime"] == "2026-11-30T10:30:50Z"  # BASE + 60*120 + 5 + 20 + 25 s
    # saves so far: 49 and 99, proven by the perf/rollout lines of 50 and 100
    assert summary.status()["checkpoints"]["latestIteration"] == 99
    assert summary.status()["checkpoints"]["count"] == 2


def test_eta_absent_until_two_rollouts_finished(reporter):
    clock = Clock(1000.0)
    s = reporter.Summary(10, clock=clock)
    assert "etaSeconds" not in s.status()["progress"]
    s.apply(reporter.Event("step", 0, {"train/loss": 1.0}))
    assert s.status()["progress"]["rollout"] == 1 and "etaSeconds" not in s.status()["progress"]
    clock.now += 30
    s.apply(reporter.Event("step", 1, {"train/loss": 1.0}))
    s.apply(reporter.Event("step", 1, {"train/loss": 1.0}))  # printed twice by miles: no change
    assert s.status()["progress"]["etaSeconds"] == 30 * 8


def test_initial_status(reporter):
    s = reporter.Summary(100, clock=Clock(0.0))
    assert s.status() == {
        "progress": {"rollout": 0, "total": 100, "percent": 0, "attempts": 1, "trainedRollouts": 0, "lastUpdateTime": "1970-01-01T00:00:00Z"},
        "metrics": {},
    }
    assert s.version == 1
    assert reporter.patch_body(s.status())["status"]["progress"]["etaSeconds"] is None


def test_version_changes_only_when_status_changes(reporter):
    clock = Clock(0.0)
    s = reporter.Summary(10, clock=clock)
    step = reporter.Event("step", 0, {"train/loss": 0.5, "train/train_rollout_logprob_abs_diff": 0.01})
    assert s.apply(step) is True
    version, stamp = s.version, s.status()["progress"]["lastUpdateTime"]
    clock.now = 500.0
    assert s.apply(step) is False  # the same step again (e.g. a duplicated log line)
    assert s.apply(reporter.Event("perf", 1, {"perf/unrelated": 3.0, "rollout/other": 1.0})) is False
    assert s.version == version and s.status()["progress"]["lastUpdateTime"] == stamp
    assert s.status()["metrics"]["trainRolloutLogprobAbsDiffMean"] == 0.01


def test_steps_map_to_the_rollout_being_trained(reporter):
    """Two optimizer steps per rollout: step n is not the rollout id."""
    s = reporter.Summary(4, clock=Clock())
    s.apply(reporter.Event("rollout", 0, {"rollout/raw_reward": 0.1}))
    assert s.status()["progress"]["rollout"] == 0  # 'rollout 0' comes before training 0
    s.apply(reporter.Event("step", 0, {"train/loss": 1.0}))
    s.apply(reporter.Event("step", 1, {"train/loss": 0.9}))
    s.apply(reporter.Event("rollout", 1, {"rollout/raw_reward": 0.2}))
    s.apply(reporter.Event("step", 2, {"train/loss": 0.8}))
    status = s.status()
    assert status["progress"]["rollout"] == 2 and status["metrics"]["step"] == 2
    assert status["metrics"]["rawReward"] == 0.2 and status["metrics"]["loss"] == 0.8


def test_fallbacks_without_step_lines(reporter):
    s = reporter.Summary(10, clock=Clock())
    s.apply(reporter.Event("rollout", 0, {"rollout/raw_reward": 0.1}))
    s.apply(reporter.Event("rollout", 1, {"rollout/raw_reward": 0.1}))
    assert s.status()["progress"]["rollout"] == 1  # rollout 1 started => rollout 0 done
    s.apply(reporter.Event("perf", 1, {"perf/actor_train_time": 3.0}))  # train timings of rollout 1
    assert s.status()["progress"]["rollout"] == 2
    s.apply(reporter.Event("perf", 5, {"rollout/response_len/mean": 3.0}))  # generation only
    assert s.status()["progress"]["rollout"] == 2


def test_step_without_rollout_lines_uses_the_step_number_and_total_clamps(reporter):
    s = reporter.Summary(3, clock=Clock())
    s.apply(reporter.Event("step", 7, {"train/loss": 1.0}))
    assert s.status()["progress"] == {**s.status()["progress"], "rollout": 3, "percent": 100, "etaSeconds": 0}


def test_nan_metrics_are_dropped_and_nulled_in_the_patch(reporter):
    s = reporter.Summary(10, clock=Clock())
    s.apply(reporter.Event("step", 0, {"train/loss": 0.5, "train/ppo_kl": 0.1, "train/train_rollout_logprob_abs_diff": 0.02}))
    s.apply(reporter.Event("step", 1, {"train/loss": math.nan, "train/ppo_kl": math.inf, "train/train_rollout_logprob_abs_diff": math.nan}))
    metrics = s.status()["metrics"]
    # the values are dropped; that the watched ones went non-finite is said, bounded (ppo_kl is not watched)
    nan_at_1 = {"since": 1, "rollout": 1, "streak": 1}
    assert metrics == {
        "step": 1,
        "trainRolloutLogprobAbsDiffMean": 0.02,
        "nonFinite": [{"metric": "loss", "value": "NaN", **nan_at_1}, {"metric": "trainRolloutLogprobAbsDiff", "value": "NaN", **nan_at_1}],
    }
    body = reporter.patch_body(s.status())
    json.dumps(body, allow_nan=False)
    assert set(body) == {"status"} and set(body["status"]) == {"progress", "metrics", "checkpoints", "history"}
    assert body["status"]["checkpoints"] == {"saving": None}  # a stale 'saving' of an earlier attempt goes
    assert body["status"]["metrics"]["loss"] is None and body["status"]["metrics"]["kl"] is None
    assert strip_nulls(body["status"]) == {**s.status(), "checkpoints": {}}


def test_a_watched_metric_non_finite_rollouts_in_a_row_is_counted_once_per_rollout_and_cleared_by_a_finite_one(reporter):
    """status.metrics.nonFinite: the rollouts in a row the reward, loss or logprob gap was
    NaN/inf, as the trainer's lines give them (the ``rollout`` line and the ``perf`` line of a
    rollout both carry its reward: one rollout, counted once)."""
    s = reporter.Summary(10, clock=Clock())

    def non_finite():
        return {e["metric"]: e for e in s.status()["metrics"].get("nonFinite", [])}

    for r in range(2, 5):
        s.apply(reporter.Event("rollout", r, {"rollout/raw_reward": math.nan}))
        s.apply(reporter.Event("perf", r, {"rollout/raw_reward": math.nan, "perf/rollout_time": 9.0}))
        s.apply(reporter.Event("step", r, {"train/loss": math.inf if r < 4 else -math.inf, "train/train_rollout_logprob_abs_diff": 0.01}))
    assert non_finite() == {
        "rawReward": {"metric": "rawReward", "value": "NaN", "since": 2, "rollout": 4, "streak": 3},
        "loss": {"metric": "loss", "value": "-Inf", "since": 2, "rollout": 4, "streak": 3},
    }
    assert "rawReward" not in s.status()["metrics"] and "loss" not in s.status()["metrics"]
    s.apply(reporter.Event("step", 5, {"train/loss": 0.25}))
    assert set(non_finite()) == {"rawReward"} and s.status()["metrics"]["loss"] == 0.25
    s.apply(reporter.Event("rollout", 6, {"rollout/raw_reward": 0.5}))
    assert "nonFinite" not in s.status()["metrics"]
    assert reporter.patch_body(s.status())["status"]["metrics"]["nonFinite"] is None  # the stored one is deleted


def test_patch_body_sends_only_owned_fields(reporter):
    body = reporter.patch_body({"progress": {"rollout": 1}, "metrics": {}, "eval": [], "checkpoints": {}, "phase": "Running", "conditions": []})
    assert set(body["status"]) == {"progress", "metrics", "eval", "checkpoints"}


def test_eval_latest_and_best(reporter):
    s = reporter.Summary(100, clock=Clock())
    for rollout, score in [(0, 0.5), (19, 0.7), (39, 0.7), (59, 0.6), (79, math.nan)]:
        s.apply(reporter.Event("eval", rollout, {"eval/aime24": score, "eval/aime24-truncated_ratio": 0.1}))
    s.apply(reporter.Event("eval", 59, {"eval/gsm8k": 0.9}))
    assert s.status()["eval"] == [
        {"name": "aime24", "latest": 0.6, "latestRollout": 59, "best": 0.7, "bestRollout": 19},
        {"name": "gsm8k", "latest": 0.9, "latestRollout": 59, "best": 0.9, "bestRollout": 59},
    ]


@pytest.mark.parametrize("total", [0, 1])
def test_degenerate_totals(reporter, total):
    s = reporter.Summary(total, clock=Clock())
    s.apply(reporter.Event("step", 0, {"train/loss": 1.0}))
    progress = s.status()["progress"]
    assert 0 <= progress["percent"] <= 100 and progress["total"] == total


def test_a_second_generated_log_with_other_parameters(reporter):
    """Two optimizer steps per rollout: step n is rollout n // 2."""
    log = generate_miles_log(num_rollouts=101, eval_interval=10, save_interval=25, seed=99, save_dir="/s", steps_per_rollout=2)
    s = reporter.Summary(101, steps_per_rollout=2, clock=Clock())
    fold(reporter, s, log.lines)
    expected = expected_final_status(log, complete_saves=[24, 49, 74, 99])  # 100 is the last: unproven by the log
    expected["checkpoints"]["saving"] = 100
    assert without_time(s.status()) == expected


def test_metrics_are_rounded_for_people(reporter):
    assert reporter.significant(0.012505800000000001) == 0.01251
    assert reporter.significant(3801.2345) == 3801.0 and reporter.significant(-1.23456e-05) == -1.235e-05
    assert reporter.significant(0.0) == 0.0 and math.isnan(reporter.significant(math.nan))
    s = reporter.Summary(10, clock=Clock())
    s.apply(reporter.Event("step", 0, {"train/train_rollout_logprob_abs_diff": 0.012505800000000001, "train/loss": 1 / 3}))
    s.apply(reporter.Event("eval", 0, {"eval/aime24": 2 / 3}))
    status = s.status()
    assert status["metrics"]["trainRolloutLogprobAbsDiff"] == 0.01251
    assert status["metrics"]["trainRolloutLogprobAbsDiffMean"] == 0.01251 and status["metrics"]["loss"] == 0.3333
    assert status["eval"][0]["latest"] == 0.6667 == status["eval"][0]["best"]
    assert "0.012505800000000001" not in json.dumps(reporter.patch_body(status))


def test_wandb_run_url(reporter):
    s = reporter.Summary(10, clock=Clock())
    assert "tracking" not in s.status()
    assert s.apply(reporter.Event("wandb", 0, {}, "https://wandb.ai/t/p/runs/abc"))
    assert s.status()["tracking"] == {"wandbRunURL": "https://wandb.ai/t/p/runs/abc"}


def test_attempts_from_the_ledger_and_no_gpu_hours(reporter):
    clock = Clock(10_000.0)
    history = [
        {"attempt": 1, "gpus": 8, "startedAt": 0.0, "aliveAt": 3600.0, "offset": 0, "finished": 80},
        {"attempt": 2, "gpus": 8, "startedAt": 9000.0, "aliveAt": 9000.0, "offset": 50, "finished": 50},
    ]
    s = reporter.Summary(100, offset=50, attempt=2, history=history, clock=clock)
    progress = s.status()["progress"]
    assert "gpuHours" not in progress  # the operator's, from the pods (control/gpuhours.py)
    assert progress["attempts"] == 2 and progress["rollout"] == 50 and progress["trainedRollouts"] == 80


def test_earlier_attempts_count_only_for_the_rollouts_kept(reporter):
    """Attempt 1 evaluated at 79 and trained steps to 79, but attempt 2 resumed after 60: that
    branch is gone. Attempt 3 (after 100) builds on attempt 1 up to 59 and attempt 2 from 60."""
    history = [
        {"attempt": 1, "offset": 0, "evals": [[0, {"aime24": 0.5}], [59, {"aime24": 0.6}], [79, {"aime24": 0.9}]], "diffs": [[0, 0.01], [59, 0.01], [79, 0.5]]},
        {"attempt": 2, "offset": 60, "evals": [[60, {"aime24": 0.55}], [99, {"aime24": 0.7}]], "diffs": [[60, 0.03], [99, 0.03]]},
        {"attempt": 3, "offset": 100, "evals": "torn", "diffs": [["x", 1]]},  # this attempt: ignored
    ]
    s = reporter.Summary(120, offset=100, attempt=3, history=history, clock=Clock())
    status = s.status()
    assert status["eval"] == [{"name": "aime24", "latest": 0.7, "latestRollout": 99, "best": 0.7, "bestRollout": 99}]
    assert status["metrics"] == {"trainRolloutLogprobAbsDiffMean": 0.02}
    assert s.ledger_fields()["evals"] == [] and s.ledger_fields()["diffs"] == []  # nothing of its own yet
    s.apply(reporter.Event("step", 0, {"train/train_rollout_logprob_abs_diff": 0.02}))
    assert s.ledger_fields()["diffs"] == [[100, 0.02]]


def test_first_rollout_id_after_a_resume_is_logged_once(reporter):
    s = reporter.Summary(100, offset=60, attempt=2, clock=Clock())
    s.apply(reporter.Event("resumed", 59, {}))
    s.apply(reporter.Event("eval", 0, {"eval/aime24": 0.5}))
    s.apply(reporter.Event("perf", 0, {"rollout/response_len/mean": 1.0}))
    assert s.notes == [
        "the trainer restored the adapter and optimizer of iteration 59",
        "attempt 2: the trainer's first rollout id is 0; it resumed after 60 rollouts, so its ids are shown as id + 60",
    ]
    assert s.status()["eval"][0]["latestRollout"] == 60
    # a trainer that continues by itself (first id >= offset) keeps its ids
    t = reporter.Summary(100, offset=60, attempt=2, clock=Clock())
    t.apply(reporter.Event("rollout", 60, {"rollout/raw_reward": 0.1}))
    t.apply(reporter.Event("step", 60, {"train/loss": 0.1}))
    assert t.status()["progress"]["rollout"] == 61 and t.status()["metrics"]["step"] == 60
    assert "continued" in t.notes[0]
    u = reporter.Summary(100, offset=60, attempt=2, clock=Clock())
    u.apply(reporter.Event("not_resumed", 0, {}, "/s/iter_0000059/adapter"))
    assert u.notes[0].startswith("WARNING: the trainer could not load /s/iter_0000059/adapter")


def test_only_the_eval_sets_the_trainer_was_given_and_https_run_urls_are_reported(reporter):
    """The job-status policy refuses a patch whose eval entries the spec does not name, and the
    CRD one with a URL other than https://: one stray log line would cost every later report."""
    from lorarl.reporter.cli import eval_sets

    command = ["python3", "train.py", "--eval-prompt-data", "aime24", "/root/datasets/a.jsonl", "gsm8k", "/root/datasets/g.jsonl", "--eval-interval", "20"]
    assert eval_sets(command) == {"aime24", "gsm8k"} and eval_sets(["python3", "train.py"]) is None
    s = reporter.Summary(10, eval_names=frozenset({"aime24"}), clock=Clock())
    assert s.apply(reporter.Event("eval", 0, {"eval/aime24": 0.5, "eval/planted": 1.0}))
    assert [e["name"] for e in s.status()["eval"]] == ["aime24"]
    assert [c["name"] for c in s.status()["history"]["eval"]] == ["aime24"]
    s.apply(reporter.Event("wandb", 0, {}, "http://wandb.local/t/p/runs/x"))
    s.apply(reporter.Event("wandb", 0, {}, "https://wandb.ai/t/p/runs/" + "x" * 600))
    assert "tracking" not in s.status()
