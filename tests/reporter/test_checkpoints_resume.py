"""Checkpoint truth on source-faithful trees (1 and 2 nodes, interrupted saves), the attempt
ledger, the resume decision, and a retry that resumes, run through the shipped artifact."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
from lorarl_dev import mileslog

from tests.reporter.reporter_testlib import r4, trainer_command


def adapter(save, it):
    return os.path.join(str(save), f"iter_{it:07d}", "adapter")


def verdict(reporter, save, ranks, attempt=1, logged=-1):
    saves = reporter.scan([reporter.SaveDir(1, str(save), 0)], ranks)
    return reporter.judge(saves, attempt, logged)


@pytest.mark.parametrize("nodes", [1, 2])
def test_every_step_of_a_save_in_write_order(reporter, tmp_path, nodes):
    """Stop the trainer's write order after each file: only the whole save is complete, and
    adapter_config.json (rank 0, before the training states) proves nothing."""
    ranks = 8 * nodes
    order = mileslog.write_order(ranks)
    assert order.index("adapter_config.json") < order.index("training_state_rank0.pt")
    for files in range(len(order) + 1):
        save = tmp_path / f"cut{files}"
        mileslog.write_save(str(save), 49, ranks, files=files)
        v = verdict(reporter, save, ranks)
        whole = files == len(order)
        assert ([s.rollout for s in v.complete], v.saving is None) == (([49], True) if whole else ([], False)), files
        if not whole:
            assert v.saving.rollout == 49


def test_two_node_tree_needs_all_sixteen_ranks(reporter, tmp_path):
    mileslog.write_tree(str(tmp_path), [19, 39], ranks=16)
    assert [s.rollout for s in verdict(reporter, tmp_path, 16).complete] == [19, 39]
    os.remove(os.path.join(adapter(tmp_path, 39), "training_state_rank15.pt"))  # node 2's last rank
    v = verdict(reporter, tmp_path, 16)
    assert [s.rollout for s in v.complete] == [19] and v.saving.rollout == 39
    assert [s.rollout for s in verdict(reporter, tmp_path, 8).complete] == [19, 39]  # 8 ranks: a 1-node job


def test_torn_file_failed_hf_export_and_newer_iteration(reporter, tmp_path):
    mileslog.write_save(str(tmp_path), 9, 8, torn_last=True)  # the last training state half-written
    assert verdict(reporter, tmp_path, 8).complete == []
    mileslog.write_save(str(tmp_path), 19, 8, hf_export=False)  # no adapter_config.json: still resumable
    v = verdict(reporter, tmp_path, 8)
    assert [s.rollout for s in v.complete] == [9, 19] and v.saving is None  # 9: a newer iteration exists
    assert not os.path.exists(os.path.join(adapter(tmp_path, 19), "adapter_config.json"))


def test_log_evidence_completes_the_current_attempts_save(reporter, tmp_path):
    mileslog.write_save(str(tmp_path), 49, 8, files=10)
    assert verdict(reporter, tmp_path, 8, logged=48).saving.rollout == 49
    assert [s.rollout for s in verdict(reporter, tmp_path, 8, logged=49).complete] == [49]
    assert verdict(reporter, tmp_path, 8, attempt=2, logged=49).complete == []  # another attempt's log proves nothing


def test_unknown_rank_count_uses_the_shards_found(reporter, tmp_path):
    mileslog.write_save(str(tmp_path), 9, 4)
    mileslog.write_save(str(tmp_path / "b"), 9, 4, files=5)  # 4 shards + adapter_model.bin
    assert [s.rollout for s in verdict(reporter, tmp_path, 0).complete] == [9]
    assert verdict(reporter, tmp_path / "b", 0).complete == []


def test_rewrite_sets_every_occurrence_and_replaces_a_user_adapter(reporter):
    argv = ["train", "--save", "/s", "--num-rollout", "100", "--lora-adapter-path", "/start", "--save", "/user"]
    assert reporter.rewrite(argv, "/s/attempt-002", 40, "/s/iter_0000059/adapter") == [
        "train",
        "--save",
        "/s/attempt-002",
        "--num-rollout",
        "40",
        "--lora-adapter-path",
        "/s/iter_0000059/adapter",
        "--save",
        "/s/attempt-002",
    ]
    assert reporter.rewrite(["train", "--lora-adapter-path", "/start"], "/s/a", 100, None) == [
        "train",
        "--lora-adapter-path",
        "/start",
        "--save",
        "/s/a",
        "--num-rollout",
        "100",
    ]  # nothing saved: the user's start


def test_ledger_numbers_attempts_from_the_volume(reporter, tmp_path):
    save = str(tmp_path)
    plans = [reporter.plan(["train", "--save", save, "--num-rollout", "100"], save, 100, 8, 8, True, 1000.0 + i) for i in range(3)]
    assert [p.attempt for p in plans] == [1, 2, 3]
    assert plans[0].argv == ["train", "--save", save, "--num-rollout", "100"]  # attempt 1: the recipe, unchanged
    assert plans[1].argv == ["train", "--save", f"{save}/attempt-002", "--num-rollout", "100"]  # nothing saved yet
    assert [r["attempt"] for r in reporter.read_all(save)] == [1, 2, 3]
    (tmp_path / "lorarl-attempts" / "004.json").write_text("{torn")  # a torn record still holds its number
    assert reporter.plan(["train"], save, 100, 8, 8, True, 0.0).attempt == 5


def test_resume_plan_picks_the_newest_complete_save_of_any_attempt(reporter, tmp_path):
    save = str(tmp_path)
    argv = ["train", "--save", save, "--num-rollout", "100"]
    reporter.plan(argv, save, 100, 8, 8, True, 0.0)
    mileslog.write_tree(save, [19, 39], 8)
    mileslog.write_save(save, 59, 8, files=12)  # interrupted half-way
    second = reporter.plan(argv, save, 100, 8, 8, True, 0.0)
    assert (second.attempt, second.offset, second.num_rollout) == (2, 40, 60)
    assert second.argv == ["train", "--save", f"{save}/attempt-002", "--num-rollout", "60", "--lora-adapter-path", adapter(save, 39)]
    mileslog.write_tree(second.save_dir, [19], 8)  # attempt 2's local 19 = rollout 59
    third = reporter.plan(argv, save, 100, 8, 8, True, 0.0)
    assert (third.offset, third.adapter) == (60, adapter(second.save_dir, 19))
    off = reporter.plan(argv, save, 100, 8, 8, False, 0.0)  # checkpoint.resume: false starts over
    assert (off.offset, off.adapter, off.num_rollout) == (0, None, 100)


# The training image's Python may be as old as 3.10: the artifact is run with the oldest one here too.
OLDEST = next((p for p in ("/root/.pyenv/versions/3.10.13/bin/python3", shutil.which("python3.10")) if p and os.path.exists(p)), None)
PYTHONS = [sys.executable] + ([OLDEST] if OLDEST else [])


def run_attempt(artifact_path, save, env, extra_env=None, total=100, python=sys.executable):
    cmd = [
        python,
        "-I",
        "-S",
        str(artifact_path),
        "--namespace",
        "ns",
        "--name",
        "job",
        "--total-rollouts",
        str(total),
        "--save-dir",
        str(save),
        "--gpus",
        "16",
        "--interval",
        "0.2",
        "--resume",
        "--",
        *trainer_command(str(save), total),
    ]
    trainer_env = {**env, **(extra_env or {}), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(cmd, capture_output=True, env=trainer_env, timeout=300)


@pytest.mark.parametrize("python", PYTHONS)
def test_a_retry_resumes_and_counts_across_attempts(artifact_path, tmp_path, fake_api, python):
    """Attempt 1 (2 nodes) dies while saving rollout 79; the re-run entrypoint resumes from 59
    in its own directory with 40 rollouts left; the status counts 100 over both attempts."""
    save = tmp_path / "checkpoints"
    token = tmp_path / "token"
    token.write_text("t")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LORARL_"))}
    env.update(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token), FAKE_RANKS="16")
    first = run_attempt(artifact_path, save, env, {"FAKE_CRASH_AFTER": "79", "FAKE_TORN": "1", "FAKE_WANDB_URL": "https://wandb.ai/t/p/runs/r1"}, python=python)
    assert first.returncode == 1, first.stderr.decode()[-2000:]
    after_first = fake_api.patches()[-1]["body"]["status"]
    assert after_first["progress"]["rollout"] == 80 and after_first["progress"]["attempts"] == 1
    assert after_first["checkpoints"]["latestIteration"] == 59 and after_first["checkpoints"]["saving"] == 79
    assert after_first["tracking"] == {"wandbRunURL": "https://wandb.ai/t/p/runs/r1"}
    torn = {p.name: p.read_bytes() for p in (save / "iter_0000079" / "adapter").iterdir()}

    second = run_attempt(artifact_path, save, env, python=python)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    notes = [line for line in second.stderr.decode().splitlines() if line.startswith("[lorarl-reporter]")]
    assert f"attempt 2: 60 of 100 rollouts done; resuming from {save}/iter_0000059/adapter; saving to {save}/attempt-002 with --num-rollout 40" in notes[0]
    assert any("the trainer's first rollout id is 0" in n and "id + 60" in n for n in notes)
    patches = [p["body"]["status"] for p in fake_api.patches()[-100:]]
    mine = patches[[p["progress"]["attempts"] for p in patches].index(2) :]
    rollouts = [p["progress"]["rollout"] for p in mine]
    assert rollouts[0] == 60 and rollouts == sorted(rollouts) and rollouts[-1] == 100
    final = mine[-1]
    assert final["progress"] == {**final["progress"], "rollout": 100, "total": 100, "percent": 100, "attempts": 2, "trainedRollouts": 120, "etaSeconds": 0}
    assert "gpuHours" not in final["progress"]  # the operator's, from the pods
    assert final["checkpoints"] == {"latestIteration": 99, "latestPath": f"{save}/attempt-002/iter_0000039/adapter", "count": 5, "saving": None}
    # evals and the logprob-diff mean cover the adapter's whole lineage: attempt 1 before 60, then attempt 2
    a1 = mileslog.attempt_log(100, save_dir=str(save), save_interval=20, ranks=16, noise=False, stop_after=79, die_saving=True, seed=100)
    a2 = mileslog.attempt_log(40, save_dir=str(save), save_interval=20, ranks=16, noise=False, seed=40)
    lineage = [(r, sc) for r, sc in a1.evals if r < 60] + [(r + 60, sc) for r, sc in a2.evals]
    assert [r for r, _ in lineage] == [0, 19, 39, 59, 60, 79, 99]
    for entry in final["eval"]:
        scores = [(sc[entry["name"]], r) for r, sc in lineage]
        best = max(v for v, _ in scores)
        assert (entry["latest"], entry["latestRollout"]) == (r4(scores[-1][0]), 99)
        assert (entry["best"], entry["bestRollout"]) == (r4(best), min(r for v, r in scores if v == best))
    diffs = [v for n, v in a1.diff.items() if n < 60] + list(a2.diff.values())
    diffs = [v for v in diffs if math.isfinite(v)]
    assert abs(final["metrics"]["trainRolloutLogprobAbsDiffMean"] - math.fsum(diffs) / len(diffs)) <= 5e-4 * final["metrics"]["trainRolloutLogprobAbsDiffMean"]
    assert {p.name: p.read_bytes() for p in (save / "iter_0000079" / "adapter").iterdir()} == torn  # never overwritten
    records = [json.loads(p.read_text()) for p in sorted((save / "lorarl-attempts").glob("*.json"))]
    assert [(r["attempt"], r["offset"], r["numRollout"], r["finished"]) for r in records] == [(1, 0, 100, 80), (2, 60, 40, 100)]
    assert [e[0] for e in records[0]["evals"]] == [0, 19, 39, 59] and [e[0] for e in records[1]["evals"]] == [60, 79, 99]

    third = run_attempt(artifact_path, save, env, python=python)  # e.g. a re-created RayJob after the end
    assert third.returncode == 0 and third.stdout == b""
    assert "all 100 rollouts are done and saved; not starting the trainer" in third.stderr.decode()
    assert fake_api.patches()[-1]["body"]["status"]["progress"]["rollout"] == 100


def test_a_resumed_trainer_that_trains_nothing_fails_the_attempt(artifact_path, tmp_path):
    """If the real trainer continued at the checkpoint's iteration + 1 by itself, the reduced
    --num-rollout would leave it nothing to do: that must not pass for a finished run."""
    save = tmp_path / "checkpoints"
    mileslog.write_tree(str(save), [59], 8)
    (save / "lorarl-attempts").mkdir()
    (save / "lorarl-attempts" / "001.json").write_text(json.dumps({"offset": 0, "saveDir": str(save)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LORARL_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(artifact_path),
            "--namespace",
            "ns",
            "--name",
            "job",
            "--total-rollouts",
            "100",
            "--save-dir",
            str(save),
            "--gpus",
            "8",
            "--resume",
            "--",
            sys.executable,
            "-c",
            "print('Resuming LoRA training from iteration 59')",
        ],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert "without training a rollout after resuming" in done.stderr.decode()
