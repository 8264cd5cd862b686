"""`lorarl status` / `lorarl wait` / `lorarl logs`: their pure parts on LoraRLJob bodies as the
API server returns them (status written by the operator's own status.compute)."""

from __future__ import annotations

from lorarl import follow
from lorarl.control import pods, status

from tests.operator.status_table import facts, rayjob


def job_with(previous: dict, ray: dict | None, generation: int = 3, **kw) -> dict:
    st, _ = status.compute(previous, ray, facts(**kw))
    return {
        "metadata": {"name": "seed", "namespace": "team", "generation": generation},
        "spec": {"rollout": {"numRollouts": 100}},
        "status": {**previous, **st},
    }


def test_wait_answers_succeeded_failed_and_stalled_with_the_reason():
    assert follow.outcome(job_with({"phase": "Running"}, rayjob("Complete", "SUCCEEDED")))[0] == follow.SUCCEEDED_EXIT
    code, line = follow.outcome(job_with({"phase": "Running"}, rayjob("Complete", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1")))
    assert code == follow.FAILED_EXIT and line == "Failed: AppFailed: Job entrypoint command failed with exit code 1"
    trouble = pods.Trouble(pods.IMAGE_PULL, "pod seed-head container ray-head: cannot pull image x (ErrImagePull): not found", True)
    code, line = follow.outcome(job_with({"phase": "Preparing"}, rayjob("Initializing"), pod_trouble=trouble))
    assert code == follow.STALLED_EXIT and line.startswith("Stalled (Preparing): ImagePullBackOff: pod seed-head container ray-head")


def test_wait_keeps_waiting_while_the_job_waits_or_runs_or_its_edit_is_not_reconciled():
    waiting = pods.Trouble(pods.UNSCHEDULABLE, "pod seed-head cannot be scheduled: 0/1 nodes are available", False)
    assert follow.outcome(job_with({"phase": "Preparing"}, rayjob("Initializing"), pod_trouble=waiting)) is None
    assert follow.outcome(job_with({"phase": "Preparing"}, rayjob("Running", "RUNNING"))) is None
    stale = job_with({"phase": "Running"}, rayjob("Complete", "FAILED"))
    stale["metadata"]["generation"] = 4  # edited after the status was written
    assert follow.outcome(stale) is None
    assert follow.outcome(None)[0] == follow.FAILED_EXIT


def test_status_text_shows_phase_reason_progress_numbers_and_where_to_look():
    body = job_with({"phase": "Preparing"}, rayjob("Running", "RUNNING"))
    body["status"].update(
        progress={"rollout": 25, "total": 100, "percent": 25, "etaSeconds": 3725, "gpuHours": 1.5, "attempts": 1},
        metrics={
            "step": 25,
            "rawReward": 0.42,
            "trainRolloutLogprobAbsDiffMean": 0.011,
            "nonFinite": [{"metric": "loss", "value": "NaN", "since": 23, "rollout": 24, "streak": 2}],
        },
        eval=[{"name": "aime", "latest": 0.3, "latestRollout": 20, "best": 0.3, "bestRollout": 20}],
        checkpoints={"latestIteration": 19, "latestPath": "/root/shared_data/seed/checkpoints/iter_0000019/adapter"},
    )
    text = follow.status_text(body)
    assert "phase:     Running" in text
    assert "reason:    Training: the trainer is running" in text
    assert "[#######.......................] 25/100 rollouts (25%)  ETA 1h02m" in text
    assert "reward 0.42" in text and "logprob-diff 0.011" in text
    assert "non-finite: loss NaN since rollout 23 (2 rollouts in a row, the latest 24)" in text
    assert "eval:      aime 0.3 (rollout 20; best 0.3)" in text
    assert "iteration 19 at /root/shared_data/seed/checkpoints/iter_0000019/adapter" in text
    assert "lorarl logs -f seed -n team" in text


def test_status_text_of_a_stuck_job_says_so():
    trouble = pods.Trouble(pods.CONFIG_ERROR, 'pod seed-head container ray-head: secret "wandb" not found', True)
    text = follow.status_text(job_with({"phase": "Preparing"}, rayjob("Initializing"), pod_trouble=trouble))
    assert "phase:     Preparing  (stalled: needs a fix)" in text
    assert 'reason:    CreateContainerConfigError: pod seed-head container ray-head: secret "wandb" not found' in text


def test_the_newest_started_submitter_pod_is_followed():
    def pod(name, created, phase):
        return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}

    assert follow.submitter_pod([pod("a", "2026-12-01T10:00:00Z", "Failed"), pod("b", "2026-12-01T10:05:00Z", "Running")])["metadata"]["name"] == "b"
    assert follow.submitter_pod([pod("a", "2026-12-01T10:00:00Z", "Running"), pod("b", "2026-12-01T10:05:00Z", "Pending")])["metadata"]["name"] == "a"
    assert follow.submitter_pod([]) is None
